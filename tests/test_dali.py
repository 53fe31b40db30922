"""The dali fix on DALI's CPU operators: the pipeline planned from real datasets of JPEG files,
its batches against the torchvision path's (labels, shapes, values), every file once an
epoch, the trial's refusals, and the code the patch writes run as plain python."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import datasets, transforms as T
from torchvision.transforms import v2

from advisor import dali
from advisor.dali import datasets as dali_datasets
from advisor.dali.plan import plan, translation
from advisor.dali.source import loader_source
from advisor.dali.transforms import Untranslatable, translate

REPO = Path(__file__).resolve().parent.parent
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def _write_jpegs(root: Path, classes: int = 3, per_class: int = 7, size=(40, 48)) -> list[Path]:
    rng = np.random.default_rng(0)
    paths = []
    for c in range(classes):
        (root / f"class_{c}").mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            base = np.full((*size, 3), 60 + 60 * c, dtype=np.float32)
            img = np.clip(base + rng.normal(0, 30, base.shape), 0, 255).astype(np.uint8)
            p = root / f"class_{c}" / f"{i:03d}.jpg"
            Image.fromarray(img).save(p, quality=95)
            paths.append(p)
    return paths


@pytest.fixture(scope="module")
def jpeg_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("jpegs")
    _write_jpegs(root)
    return root


def _loader(ds, **kw) -> torch.utils.data.DataLoader:
    return torch.utils.data.DataLoader(ds, **{"batch_size": 4, **kw})


def _dali_loader(loader):
    files, tr = translation(loader)
    namespace: dict = {}
    exec(compile(loader_source(tr, files), "<dali>", "exec"), namespace)  # noqa: S102
    made = namespace["_DaliLoader"].replacing(loader)
    assert made is not loader
    return made


class Indexed(torch.utils.data.Dataset):
    """A custom dataset of the common kind: paths and labels it holds, PIL in __getitem__."""

    def __init__(self, paths, labels, transform=None):
        self.paths = [str(p) for p in paths]
        self.labels = list(labels)
        self.transform = transform

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        image = Image.open(self.paths[i]).convert("RGB")
        if self.transform is not None:
            image = self.transform(image)
        return image, self.labels[i]


# --- transforms -> DALI operators -----------------------------------------------------

def test_imagenet_train_transforms_become_a_cropping_decoder_resize_and_one_normalize():
    tr = translate(T.Compose([T.RandomResizedCrop(224, scale=(0.35, 1.0)), T.RandomHorizontalFlip(),
                              T.ToTensor(), T.Normalize(MEAN, STD)]))
    body = "\n".join(tr.lines)
    assert "fn.decoders.image_random_crop(encoded" in body and "random_area=[0.35, 1.0]" in body
    assert "fn.resize(images, resize_x=224, resize_y=224, interp_type=types.INTERP_LINEAR" in body
    assert "mirror=fn.random.coin_flip(probability=0.5)" in body
    assert "mean=[123.675, 116.28, 103.53]" in body and "std=[58.395, 57.12, 57.375]" in body
    assert tr.size == (224, 224) and tr.dtype == "float32" and tr.random and tr.channels == 3


def test_validation_transforms_resize_the_shorter_side_then_crop_the_centre():
    tr = translate(T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), T.Normalize(MEAN, STD)]))
    body = "\n".join(tr.lines)
    assert "fn.decoders.image(encoded" in body and "resize_shorter=256" in body
    assert "fn.crop(images, crop=[224, 224], out_of_bounds_policy=\"pad\")" in body
    assert not tr.random and tr.size == (224, 224)


def test_v2_colour_jitter_random_crop_and_uint8_output():
    tr = translate(v2.Compose([v2.ToImage(), v2.RandomCrop(32), v2.ColorJitter(0.4, 0.2),
                               v2.RandomVerticalFlip(0.3)]))
    body = "\n".join(tr.lines)
    assert "crop_pos_x=fn.random.uniform(range=[0.0, 1.0])" in body and "fn.flip(images, vertical=" in body
    assert "fn.color_twist(images, brightness=fn.random.uniform(range=[0.6, 1.4]), contrast=" in body
    assert tr.dtype == "uint8" and tr.size == (32, 32)
    tr = translate(v2.Compose([v2.ColorJitter(brightness=0.4, hue=0.1), v2.ToImage(),
                               v2.ToDtype(torch.float32, scale=True)]))
    body = "\n".join(tr.lines)
    assert "brightness=fn.random.uniform(range=[0.6, 1.4])" in body and "hue=fn.random.uniform(range=[-36.0, 36.0])" in body
    assert "contrast" not in body and tr.dtype == "float32" and tr.size is None


@pytest.mark.parametrize("transform,named", [
    (T.Compose([T.RandomRotation(10), T.ToTensor()]), "RandomRotation"),
    (T.Compose([T.Lambda(lambda x: x), T.ToTensor()]), "Lambda"),
    (T.Compose([T.RandomCrop(32, padding=4), T.ToTensor()]), "padding"),
    (T.Compose([T.Resize(64, interpolation=T.InterpolationMode.BOX), T.ToTensor()]), "box"),
    (T.Compose([T.RandomResizedCrop(32)]), "PIL image"),
])
def test_a_transform_without_a_mapping_refuses_with_its_name(transform, named):
    with pytest.raises(Untranslatable, match=named):
        translate(transform)


# --- the dataset's files ----------------------------------------------------------------

def test_imagefolder_subset_and_custom_datasets_give_their_files_and_labels(jpeg_root):
    folder = datasets.ImageFolder(jpeg_root, transform=T.ToTensor())
    files = dali_datasets.files_of(folder)
    assert files.samples == "dataset.samples" and files.count == 21
    pairs = dali_datasets.evaluate(files, folder)
    assert pairs == [(os.path.abspath(p), c) for p, c in folder.samples]

    sub = torch.utils.data.Subset(folder, [5, 0, 20])
    pairs = dali_datasets.evaluate(dali_datasets.files_of(sub), sub)
    assert pairs == [(os.path.abspath(folder.samples[i][0]), folder.samples[i][1]) for i in (5, 0, 20)]

    paths = [p for p, _ in folder.samples]
    custom = Indexed(paths, range(len(paths)), T.ToTensor())
    files = dali_datasets.files_of(custom)
    assert files.samples == "list(zip(dataset.paths, dataset.labels))" and not files.gray
    assert [y for _, y in dali_datasets.evaluate(files, custom)] == list(range(len(paths)))
    assert dali_datasets.check(custom, dali_datasets.evaluate(files, custom), 3, (40, 48)) is None
    assert "label" in dali_datasets.check(custom, [(p, 99) for p in paths], 3, None)


def test_datasets_that_are_not_image_files_are_refused_with_the_reason(jpeg_root):
    with pytest.raises(dali_datasets.NotFiles, match="no list of image paths"):
        dali_datasets.files_of(datasets.FakeData(8, (3, 8, 8), transform=T.ToTensor()))
    with pytest.raises(dali_datasets.NotFiles, match="target_transform"):
        dali_datasets.files_of(datasets.ImageFolder(jpeg_root, target_transform=lambda y: y + 1))
    with pytest.raises(dali_datasets.NotFiles, match="own loader"):
        dali_datasets.files_of(datasets.ImageFolder(jpeg_root, loader=lambda p: Image.open(p)))


def test_plan_records_the_class_the_mapping_and_a_measured_sample_cost(jpeg_root):
    folder = datasets.ImageFolder(jpeg_root, transform=T.Compose([T.RandomResizedCrop(24), T.ToTensor()]))
    p = plan(_loader(folder, shuffle=True, num_workers=2))
    assert p["images"] and p["kind"] == "ImageFolder" and p["files"] == 21 and p["random"]
    assert p["source"].startswith("class _DaliLoader:") and p["cost"]["item_ms"] > 0 and p["cost"]["decode_ms"] > 0
    compile(p["source"], "<plan>", "exec")
    refused = plan(_loader(folder, sampler=torch.utils.data.WeightedRandomSampler([1.0] * 21, 21)))
    assert refused["images"] and "own sampler (WeightedRandomSampler)" in refused["why_not"] and "source" not in refused
    assert "source" not in plan(_loader(datasets.FakeData(8, (3, 8, 8), transform=T.ToTensor())))


# --- DALI's CPU operators against the torchvision path ----------------------------------

def test_deterministic_pipeline_matches_torchvision_batch_by_batch(jpeg_root):
    tf = T.Compose([T.Resize(36), T.CenterCrop(32), T.ToTensor(), T.Normalize(MEAN, STD)])
    folder = datasets.ImageFolder(jpeg_root, transform=tf)
    loader = _loader(folder, shuffle=False)
    made = _dali_loader(loader)
    assert len(made) == len(loader) == 6
    diffs = []
    for (want_x, want_y), (got_x, got_y) in zip(loader, made, strict=True):
        assert got_x.shape == want_x.shape and got_x.dtype == want_x.dtype == torch.float32
        assert got_x.device.type == "cpu"   # no GPU here: DALI's CPU operators
        assert got_y.dtype == torch.int64 and torch.equal(got_y, want_y)
        diffs.append((got_x - want_x).abs().mean().item())
    # JPEG decoding (libjpeg-turbo both) and antialiased resizing differ in rounding only
    assert max(diffs) < 0.05, diffs


def test_random_pipeline_covers_every_file_once_an_epoch_in_a_new_order(jpeg_root):
    folder = datasets.ImageFolder(jpeg_root)
    paths = [p for p, _ in folder.samples]
    tf = T.Compose([T.RandomResizedCrop(16, scale=(0.35, 1.0)), T.RandomHorizontalFlip(), T.ToTensor(),
                    T.Normalize(MEAN, STD)])
    made = _dali_loader(_loader(Indexed(paths, range(len(paths)), tf), shuffle=True))
    orders = []
    for _ in range(3):
        labels, lo, hi = [], float("inf"), float("-inf")
        for x, y in made:
            assert x.shape[1:] == (3, 16, 16)
            labels += y.tolist()
            lo, hi = min(lo, x.min().item()), max(hi, x.max().item())
        assert sorted(labels) == list(range(len(paths)))     # every file once, the last batch partial
        assert (0 - max(MEAN)) / min(STD) - 1e-3 <= lo and hi <= (1 - min(MEAN)) / min(STD) + 1e-3
        orders.append(labels)
    assert orders[0] != orders[1] != orders[2]

    dropped = _dali_loader(_loader(Indexed(paths, range(len(paths)), tf), shuffle=False, batch_size=4, drop_last=True))
    sizes = [len(y) for _, y in dropped]
    assert sizes == [4] * 5 and len(dropped) == 5
    assert [y for _, ys in dropped for y in ys.tolist()] == list(range(20))   # in order, the last file dropped


# --- the trial's applicability --------------------------------------------------------

def test_not_applicable_says_why_and_how_to_install():
    from advisor.interventions import dali as fix

    cfg = {"dataloader": {"value": {"dali": {"images": True, "why_not": "transform Lambda has no DALI equivalent"}}}}
    assert "Lambda" in fix.not_applicable(cfg, {}, {})
    ok = {"dataloader": {"value": {"dali": {"images": True, "source": "class _DaliLoader: ..."}}}}
    assert fix.not_applicable(ok, {}, {}) is None
    assert fix.not_applicable({}, {}, {}) == "the script uses no torch DataLoader"
    real = dali.installed
    try:
        dali.installed = lambda: False
        why = fix.not_applicable(ok, {"cuda": "13.0"}, {})
    finally:
        dali.installed = real
    assert "not installed" in why and "advisor[dali-cuda13]" in why
    assert "nvidia-dali-cuda120" in dali.install_hint("12.8")


# --- end to end: the trial through advisor analyze, the patch as plain python ----------

@pytest.fixture(scope="module")
def dali_run(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("dali_run")
    args = ["--device", "cpu", "--steps", "40", "--batch-size", "8", "--image-size", "32", "--num-images", "160",
            "--workers", "1", "--out", str(work)]
    proc = subprocess.run([sys.executable, "-m", "advisor", "analyze", "--fix", "dali", "--out", str(work / "run"),
                           "--budget", "5", str(REPO / "examples" / "imagefolder.py"), *args],
                          cwd=work, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return work


def test_analyze_trials_dali_through_the_dataloader(dali_run):
    doc = json.loads((dali_run / "run" / "run.json").read_text())
    seen = doc["config"]["dataloader"]["value"]["dali"]
    assert seen["kind"] == "ImageFolder" and seen["files"] == 160 and "source" in seen
    trial = next(t for t in doc["trials"] if t["name"].endswith("dali"))
    assert trial["status"] in ("accepted", "rejected"), trial   # ran: neither skipped nor failed
    child = json.loads((dali_run / "run" / "trials" / trial["name"] / "child.json").read_text())
    assert child["config"]["dali"]["value"]["iterators"] >= 1 and child["config"]["dali"]["value"]["batch_size"] == 8
    assert not any("intervention not applied" in n for n in child["notes"])
    assert "dali" not in doc["config"]     # the baseline's own batches came from its DataLoader


def test_the_patch_runs_as_plain_python_with_dali_batches(dali_run):
    from advisor.fixes import make_patch

    doc = json.loads((dali_run / "run" / "run.json").read_text())
    texts: dict = {}
    diff, notes = make_patch(str(REPO / "examples" / "imagefolder.py"), [{"intervention": "dali", "params": {}}],
                             doc["config"], texts=texts, executed=doc.get("executed_lines"))
    assert notes[0]["applied"], notes
    assert "+class _DaliLoader:" in diff and "+    loader = _DaliLoader.replacing(loader)" in diff
    patched = dali_run / "patched_imagefolder.py"
    patched.write_text(texts["imagefolder.py"])
    probe = ("import runpy, sys; sys.argv = sys.argv[1:]; "
             "g = runpy.run_path(sys.argv[0], run_name='not_main'); "
             "import torch, torchvision; ds = torchvision.datasets.ImageFolder(sys.argv[1]); "
             "L = g['_DaliLoader'].replacing(torch.utils.data.DataLoader(ds, batch_size=8, shuffle=True)); "
             "print(type(L).__name__, len(L))")
    out = subprocess.run([sys.executable, "-c", probe, str(patched), str(dali_run / "imagefolder-data")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.split() == ["_DaliLoader", "20"], out.stdout + out.stderr
    run = subprocess.run([sys.executable, str(patched), "--device", "cpu", "--steps", "12", "--batch-size", "8",
                          "--image-size", "32", "--num-images", "160", "--out", str(dali_run)],
                         capture_output=True, text=True, timeout=300, cwd=dali_run)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "done: 12 steps" in run.stdout
