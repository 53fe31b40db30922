"""Stand-in data for the wild corpus's entries, written into an entry's working copy before its
script runs (benchmarks/wild.py): each manifest entry's ``data`` lists what to make, its paths
relative to the entry's working directory, as the authors' README would have the user download
it. Everything is synthetic and deterministic (seeded); nothing comes from the network.

Kinds (each a dict with ``kind`` and its fields; ``on``: {"gpu": {field: value}} overrides a field
on that device, e.g. more images for a real-size run):
- ``images``: ``dir``, ``n``, ``size`` [w, h], ``mode`` (RGB/L), ``ext``, ``stem`` ("{i}"), ``classes``
  (n images of each class, its number {c} in the stem)
- ``imagefolder``: ``dir``, ``splits`` (subfolders, e.g. ["train", "validation"]; [] for none),
  ``classes``, ``per_class``, ``size``, ``ext``
- ``masks``: ``images`` dir and ``masks`` dir of pairs (``mask_suffix``), ``n``, ``size``, ``classes``
- ``voc``: a VOCdevkit/VOC2012 tree under ``dir`` (JPEGImages, SegmentationClass, ImageSets)
- ``text``: ``path``, ``bytes`` of word text; ``gzip``: true to write it gzipped; ``if_absent``: only
  where the tree lacks it (a shipped file over the snapshot's size limit)
- ``run``: ``cmd``, an authors' own preparation command run in the working directory
- ``hf_model``: a Hugging Face hub cache entry (``repo``, ``arch``, ``config``: overrides; the
  ``cpu`` overrides where the device is the CPU) with random weights and a tokenizer, so
  ``from_pretrained(repo)`` loads offline (HF_HUB_OFFLINE=1, HF_HOME set by wild.py)
- ``timm_model``: the same for a timm model (``repo`` "timm/NAME", ``model``)
- ``torch_hub``: a state dict of a torchvision-style constructor (``builder`` "module:function")
  saved where ``torch.hub.load_state_dict_from_url`` looks for ``file``
"""

from __future__ import annotations

import gzip
import json
import string
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np

WORDS = ("the of and to in a is that for it as was with be by on not he this are or his from at which but have an "
         "they you were her she there been one all we their has would when if can more will no out so said what up its "
         "about into than them only other new some could time these two may then do first any my now such like our over "
         "man me even most made after also did many before must through back years where much your way well down should "
         "because each just those people how too little state good very make world still own see men work long get here "
         "between both life being under never day same another know while last might us great old year off come since").split()


def _rng(key: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(key.encode()))


def _image(g: np.random.Generator, size, mode: str):
    from PIL import Image
    w, h = size
    shape = (h, w) if mode == "L" else (h, w, 3)
    # smooth blobs rather than white noise: JPEG files of realistic size and decode cost
    small = g.integers(0, 256, (max(2, h // 16), max(2, w // 16)) + shape[2:], dtype=np.uint8)
    return Image.fromarray(small, mode=mode).resize((w, h))


def images(cwd: Path, spec: dict) -> None:
    out = cwd / spec["dir"]
    out.mkdir(parents=True, exist_ok=True)
    g = _rng(spec["dir"])
    for c in range(spec.get("classes", 1)):   # with classes: n of each, the class in the name (stem "{c}_{i}")
        for i in range(spec.get("n", 64)):
            name = spec.get("stem", "{i}").format(c=c, i=i) + spec.get("ext", ".jpg")
            _image(g, spec.get("size", [256, 256]), spec.get("mode", "RGB")).save(out / name)


def imagefolder(cwd: Path, spec: dict) -> None:
    g = _rng(spec["dir"])
    for split in spec.get("splits", ["train", "val"]) or [""]:
        per = spec.get("per_class", 16) if split in ("", "train") else spec.get("val_per_class", spec.get("per_class", 16))
        for c in range(spec.get("classes", 10)):
            d = cwd / spec["dir"] / split / f"n{c:08d}"
            d.mkdir(parents=True, exist_ok=True)
            for i in range(per):
                _image(g, spec.get("size", [256, 256]), "RGB").save(d / f"{c}_{i}{spec.get('ext', '.JPEG')}")


def masks(cwd: Path, spec: dict) -> None:
    from PIL import Image
    g = _rng(spec["images"])
    imgs, msks = cwd / spec["images"], cwd / spec["masks"]
    imgs.mkdir(parents=True, exist_ok=True)
    msks.mkdir(parents=True, exist_ok=True)
    w, h = spec.get("size", [320, 240])
    for i in range(spec.get("n", 32)):
        _image(g, (w, h), "RGB").save(imgs / f"img{i:04d}{spec.get('ext', '.jpg')}")
        m = (g.integers(0, spec.get("classes", 2), (h // 8, w // 8), dtype=np.uint8))
        Image.fromarray(m * (255 // max(1, spec.get("classes", 2) - 1)), mode="L").resize((w, h), Image.NEAREST) \
            .save(msks / f"img{i:04d}{spec.get('mask_suffix', '')}.png")


def voc(cwd: Path, spec: dict) -> None:
    from PIL import Image
    root = cwd / spec["dir"] / "VOCdevkit" / "VOC2012"
    g = _rng(spec["dir"])
    (root / "ImageSets" / "Segmentation").mkdir(parents=True, exist_ok=True)
    for sub in ("JPEGImages", "SegmentationClass"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    names = [f"2007_{i:06d}" for i in range(spec.get("n", 64))]
    w, h = spec.get("size", [500, 375])
    for n in names:
        _image(g, (w, h), "RGB").save(root / "JPEGImages" / f"{n}.jpg")
        m = Image.fromarray(g.integers(0, 21, (h // 16, w // 16), dtype=np.uint8), mode="P").resize((w, h), Image.NEAREST)
        m.save(root / "SegmentationClass" / f"{n}.png")
    cut = max(1, len(names) // 8)
    for split, part in (("train", names[cut:]), ("val", names[:cut]), ("trainval", names)):
        (root / "ImageSets" / "Segmentation" / f"{split}.txt").write_text("\n".join(part) + "\n")


def text(cwd: Path, spec: dict) -> None:
    path = cwd / spec["path"]
    if spec.get("if_absent") and path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    g = _rng(spec["path"])
    want = spec.get("bytes", 1_000_000)
    words = np.array([w + " " for w in WORDS] + [".\n"] * 6)  # about one line end in 20 words
    n = want // 4 + 64   # words of 4-5 bytes on average: enough, cut to the size below
    # every printable character once first: char-level scripts prompt with text of their own ("O God, O God!")
    head = string.ascii_letters + string.digits + string.punctuation + "\n"
    data = (head + "".join(words[g.integers(0, len(words), n)])).encode()
    while len(data) < want:
        data += data
    data = data[:want]
    if spec.get("gzip"):
        path.write_bytes(gzip.compress(data, compresslevel=1))
    else:
        path.write_bytes(data)


def run(cwd: Path, spec: dict) -> None:
    subprocess.run(spec["cmd"], shell=True, cwd=cwd, check=True, timeout=600)


def _snapshot(hf_home: Path, repo: str) -> Path:
    """The hub cache folder of repo's revision 'main', made (models--ORG--NAME/snapshots/...)."""
    base = hf_home / "hub" / ("models--" + repo.replace("/", "--"))
    rev = "0" * 40
    (base / "refs").mkdir(parents=True, exist_ok=True)
    (base / "refs" / "main").write_text(rev)
    snap = base / "snapshots" / rev
    snap.mkdir(parents=True, exist_ok=True)
    return snap


def _wordpiece_vocab() -> list[str]:
    chars = [chr(c) for c in range(33, 127)]
    return ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, *chars, *("##" + c for c in chars)]


def hf_model(cwd: Path, spec: dict, device: str, hf_home: Path) -> None:
    import transformers as tf
    snap = _snapshot(hf_home, spec["repo"])
    if (snap / "config.json").exists():
        return
    arch = spec["arch"]
    cfg = dict(spec.get("config") or {})
    if device == "cpu":
        cfg.update(spec.get("cpu") or {})
    if arch == "bert":
        vocab = _wordpiece_vocab()
        (snap / "vocab.txt").write_text("\n".join(vocab) + "\n")
        (snap / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False, "model_max_length": 512}))
        config = tf.BertConfig(**cfg)
        model = tf.BertForPreTraining(config)
    elif arch == "gpt2":
        from tokenizers import ByteLevelBPETokenizer
        tok = ByteLevelBPETokenizer()
        tok.train_from_iterator([" ".join(WORDS)] * 50, vocab_size=600, min_frequency=1, special_tokens=["<|endoftext|>"])
        tok.save_model(str(snap))
        (snap / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 1024, "eos_token": "<|endoftext|>",
                                                                 "bos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"}))
        config = tf.GPT2Config(**cfg)
        model = tf.GPT2LMHeadModel(config)
    else:
        raise ValueError(f"hf_model: unknown arch {arch!r}")
    model.save_pretrained(snap)


def timm_model(cwd: Path, spec: dict, device: str, hf_home: Path) -> None:
    import timm
    import torch  # noqa: F401
    from safetensors.torch import save_file
    snap = _snapshot(hf_home, spec["repo"])
    if (snap / "model.safetensors").exists():
        return
    model = timm.create_model(spec["model"], pretrained=False)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(snap / "model.safetensors"))
    cfg = {"architecture": spec["model"], "num_classes": model.num_classes, "pretrained_cfg": model.pretrained_cfg}
    (snap / "config.json").write_text(json.dumps(cfg, default=str))


def torch_hub(cwd: Path, spec: dict, device: str, hf_home: Path) -> None:
    import importlib

    import torch
    mod, fn = spec["builder"].split(":")
    where = hf_home.parent / "torch" / "hub" / "checkpoints"
    where.mkdir(parents=True, exist_ok=True)
    if not (where / spec["file"]).exists():
        sys.path.insert(0, str(cwd))
        try:
            model = getattr(importlib.import_module(mod), fn)(**(spec.get("kwargs") or {}))
        finally:
            sys.path.remove(str(cwd))
        torch.save(model.state_dict(), where / spec["file"])


PLAIN = {"images": images, "imagefolder": imagefolder, "masks": masks, "voc": voc, "text": text, "run": run}
HUB = {"hf_model": hf_model, "timm_model": timm_model, "torch_hub": torch_hub}


def make(cwd: Path, data: list[dict], device: str, hf_home: Path) -> None:
    """Every stand-in of one entry, in its working directory cwd."""
    for spec in data:
        spec = {**spec, **(spec.get("on") or {}).get(device, {})}   # "on": {"gpu": {...}}: the real size's overrides
        kind = spec["kind"]
        if kind in PLAIN:
            PLAIN[kind](cwd, spec)
        elif kind in HUB:
            HUB[kind](cwd, spec, device, hf_home)
        elif kind != "shim":
            raise ValueError(f"unknown stand-in kind {kind!r}")
