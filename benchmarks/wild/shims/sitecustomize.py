"""Stand-in data for the wild corpus (benchmarks/wild.py puts this folder on PYTHONPATH).

The wild scripts run exactly as their authors wrote them; where one would download a data set
(torchvision's MNIST/CIFAR/STL10, Hugging Face `datasets.load_dataset`, `evaluate.load`), this
module, imported by Python at start-up as ``sitecustomize``, swaps the loader for one that makes
synthetic data of the same shapes, types and class counts, so no process needs the network.
Active only where WILD_SHIM=1 (wild.py sets it); every swap is made when its module is first
imported, so a process that never imports torchvision pays nothing.

WILD_DATA_N caps a split's size (default: the real size, the unlabeled STL10 split 20,000).
WILD_CPU_CUDA=1 makes ``.cuda()`` a no-op on a machine without CUDA, for scripts that move to
the GPU unconditionally (their CPU configurations only).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys

_PATCHERS = {}


def _patch(module_name):
    def register(fn):
        _PATCHERS[module_name] = fn
        return fn
    return register


def _n(real: int) -> int:
    cap = os.environ.get("WILD_DATA_N")
    return min(real, int(cap)) if cap else real


class _PostImport(importlib.abc.MetaPathFinder):
    """Runs the patcher of a module right after the module is executed."""

    def find_spec(self, name, path, target=None):
        if name not in _PATCHERS:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def run(module):
            exec_module(module)
            _PATCHERS[name](module)
        loader.exec_module = run
        return spec


# -- torchvision ---------------------------------------------------------------------------

@_patch("torchvision.datasets")
def _torchvision(tvd):
    import numpy as np
    import torch
    from torchvision.datasets.vision import VisionDataset

    def _rng(train: bool, salt: int):
        return np.random.default_rng(1000 * salt + int(train))

    def mnist_like(base, sizes, n_classes=10):
        class Synthetic(base):
            def __init__(self, root, train=True, transform=None, target_transform=None, download=False, **kw):
                VisionDataset.__init__(self, root, transform=transform, target_transform=target_transform)
                self.train = train
                n = _n(sizes[0] if train else sizes[1])
                g = _rng(train, 1)
                self.data = torch.from_numpy(g.integers(0, 256, (n, 28, 28), dtype=np.uint8))
                self.targets = torch.from_numpy(g.integers(0, n_classes, n)).long()
        Synthetic.__name__ = Synthetic.__qualname__ = base.__name__
        Synthetic.__module__ = base.__module__
        return Synthetic

    def cifar_like(base, n_classes):
        class Synthetic(base):
            def __init__(self, root, train=True, transform=None, target_transform=None, download=False):
                VisionDataset.__init__(self, root, transform=transform, target_transform=target_transform)
                self.train = train
                n = _n(50000 if train else 10000)
                g = _rng(train, 2)
                self.data = g.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)
                self.targets = g.integers(0, n_classes, n).tolist()
                self.classes = [f"class{i}" for i in range(n_classes)]
                self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        Synthetic.__name__ = Synthetic.__qualname__ = base.__name__
        Synthetic.__module__ = base.__module__
        return Synthetic

    class STL10(tvd.STL10):
        def __init__(self, root, split="train", folds=None, transform=None, target_transform=None, download=False):
            VisionDataset.__init__(self, root, transform=transform, target_transform=target_transform)
            self.split, self.folds = split, folds
            real = {"train": 5000, "test": 8000, "unlabeled": 20000, "train+unlabeled": 25000}[split]
            n = _n(real)
            g = _rng(split == "train", 3)
            self.data = g.integers(0, 256, (n, 3, 96, 96), dtype=np.uint8)
            self.labels = g.integers(0, 10, n) if split != "unlabeled" else np.full(n, -1)
            self.classes = [f"class{i}" for i in range(10)]
    STL10.__module__ = tvd.STL10.__module__

    tvd.MNIST = mnist_like(tvd.MNIST, (60000, 10000))
    tvd.FashionMNIST = mnist_like(tvd.FashionMNIST, (60000, 10000))
    tvd.KMNIST = mnist_like(tvd.KMNIST, (60000, 10000))
    tvd.CIFAR10 = cifar_like(tvd.CIFAR10, 10)
    tvd.CIFAR100 = cifar_like(tvd.CIFAR100, 100)
    tvd.STL10 = STL10
    for sub in ("mnist", "cifar", "stl10"):   # `from torchvision.datasets.mnist import MNIST`
        mod = sys.modules.get(f"torchvision.datasets.{sub}")
        for cls in ("MNIST", "FashionMNIST", "KMNIST", "CIFAR10", "CIFAR100", "STL10"):
            if mod is not None and hasattr(mod, cls):
                setattr(mod, cls, getattr(tvd, cls))


# -- Hugging Face datasets / evaluate ------------------------------------------------------

_WORDS = ("the a of to and in is was for on that with as by at from it his an were are which this be "
          "model train data time first new after two one year people state city world day over under "
          "music film game team season school house river music light power water history").split()


def _sentences(g, n, lo=6, hi=30):
    return [" ".join(g.choice(_WORDS, size=int(g.integers(lo, hi)))) for _ in range(n)]


_GLUE = {  # name: (text columns, labels, train size)
    "mrpc": (("sentence1", "sentence2"), 2, 3668), "sst2": (("sentence",), 2, 67349),
    "cola": (("sentence",), 2, 8551), "qnli": (("question", "sentence"), 2, 104743),
    "rte": (("sentence1", "sentence2"), 2, 2490), "qqp": (("question1", "question2"), 2, 363846),
    "mnli": (("premise", "hypothesis"), 3, 392702), "stsb": (("sentence1", "sentence2"), 0, 5749),
}


def _synthetic_dataset(path, name=None, **kw):
    import datasets as hf
    import numpy as np
    g = np.random.default_rng(7)
    key = str(path).split("/")[-1].lower()
    if key in ("glue", "nyu-mll/glue") or key in _GLUE:
        cols, labels, n_train = _GLUE[(name or key).lower()]
        splits = {"train": _n(n_train), "validation": min(_n(n_train), 1000), "test": min(_n(n_train), 1000)}
        if (name or "") == "mnli":
            splits = {"train": _n(n_train), "validation_matched": 1000, "validation_mismatched": 1000}
        out = {}
        for split, n in splits.items():
            cols_data = {c: _sentences(g, n) for c in cols}
            cols_data["label"] = (g.random(n) * 5).tolist() if labels == 0 else g.integers(0, labels, n).tolist()
            cols_data["idx"] = list(range(n))
            features = hf.Features({**{c: hf.Value("string") for c in cols},
                                    "label": hf.Value("float32") if labels == 0 else hf.ClassLabel(num_classes=labels),
                                    "idx": hf.Value("int32")})
            out[split] = hf.Dataset.from_dict(cols_data, features=features)
        return hf.DatasetDict(out)
    if key in ("wikitext", "salesforce/wikitext", "tiny_shakespeare", "openwebtext", "bookcorpus"):
        n = _n(36718)
        out = {s: hf.Dataset.from_dict({"text": _sentences(g, m, 10, 120)})
               for s, m in (("train", n), ("validation", min(n, 3760)), ("test", min(n, 4358)))}
        return hf.DatasetDict(out)
    if key in ("imdb", "yelp_polarity", "rotten_tomatoes", "ag_news"):
        labels = 4 if key == "ag_news" else 2
        out = {s: hf.Dataset.from_dict({"text": _sentences(g, m, 40, 200), "label": g.integers(0, labels, m).tolist()},
                                       features=hf.Features({"text": hf.Value("string"),
                                                             "label": hf.ClassLabel(num_classes=labels)}))
               for s, m in (("train", _n(25000)), ("test", min(_n(25000), 2000)))}
        return hf.DatasetDict(out)
    return None


@_patch("datasets")
def _datasets(hf):
    if not hasattr(hf, "DatasetDict"):   # the script's own datasets.py (PyTorch-GAN's), not Hugging Face's
        return
    real = hf.load_dataset

    def load_dataset(path, name=None, *args, **kw):
        local = os.path.exists(str(path)) or str(path) in ("imagefolder", "audiofolder", "csv", "json", "text", "parquet")
        made = None if local else _synthetic_dataset(path, name, **kw)
        if made is None:
            return real(path, name, *args, **kw)
        split = kw.get("split")
        return made[split] if isinstance(split, str) and split in made else made
    load_dataset.__wrapped__ = real
    hf.load_dataset = load_dataset


class _Metric:
    """What `evaluate.load(...)` returns for the metrics the corpus's scripts ask for."""

    def __init__(self, names):
        self.names, self.preds, self.refs = names, [], []

    def add_batch(self, predictions=None, references=None):
        self.preds += list(map(float, predictions)); self.refs += list(map(float, references))

    def compute(self, predictions=None, references=None, **kw):
        if predictions is not None:
            self.add_batch(predictions, references)
        p, r = self.preds, self.refs
        acc = sum(a == b for a, b in zip(p, r)) / max(1, len(p))
        tp = sum(a == b == 1 for a, b in zip(p, r)); fp = sum(a == 1 and b != 1 for a, b in zip(p, r))
        fn = sum(a != 1 and b == 1 for a, b in zip(p, r))
        f1 = 2 * tp / max(1, 2 * tp + fp + fn)
        self.preds, self.refs = [], []
        return {k: v for k, v in (("accuracy", acc), ("f1", f1)) if k in self.names or not self.names}


@_patch("evaluate")
def _evaluate(ev):
    if not hasattr(ev, "EvaluationModule"):   # the script's own evaluate.py (Pytorch-UNet's)
        return

    def load(path, config_name=None, *a, **kw):
        names = {"glue": ["accuracy", "f1"], "accuracy": ["accuracy"], "f1": ["f1"]}.get(str(path), [])
        return _Metric(names)
    ev.load = load


# -- CUDA-only scripts on a CPU machine ------------------------------------------------------

def _cpu_cuda():
    import torch
    if torch.cuda.is_available():
        return
    torch.Tensor.cuda = lambda self, *a, **k: self
    torch.nn.Module.cuda = lambda self, *a, **k: self


@_patch("torch")
def _torch(torch_mod):
    if os.environ.get("WILD_CPU_CUDA") == "1":
        _cpu_cuda()


if os.environ.get("WILD_SHIM") == "1":
    sys.meta_path.insert(0, _PostImport())
