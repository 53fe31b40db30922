"""Which files a map-style dataset reads, and with which labels and transforms.

``files_of(dataset)`` answers with a ``Files``: a python expression over the name ``dataset``
that gives the (path, label) pairs in the dataset's own index order (the dali fix evaluates it
at run time, and writes the same expression into the user's script), the transform, and how
the files are opened; or raises ``NotFiles`` with the reason.

Recognized: torchvision's DatasetFolder and ImageFolder (``samples``, PIL's RGB loader),
``Subset`` of a recognized dataset, and a custom Dataset whose ``__getitem__`` opens paths it
holds: a list of (path, label) pairs, or a list of paths beside a list of integer labels of
the same length, with the image opened by PIL (``.convert("RGB")`` / ``"L"``) or read by
torchvision.io. What the attributes suggest is then checked on the samples themselves
(``check``): the labels dataset[i] returns, and the image's channels.
"""

from __future__ import annotations

import inspect
import numbers
import os
import re
from dataclasses import dataclass

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp", ".jp2", ".pnm", ".ppm", ".pgm")


class NotFiles(Exception):
    """The dataset does not read image files advisor can hand to DALI; the message says why."""


@dataclass
class Files:
    samples: str                 # python over `dataset`: the (path, label) pairs, index order
    transform: object            # the per-image transform (None: none)
    gray: bool = False           # opened in mode "L"
    decoded_tensor: bool = False  # read as a uint8 CHW tensor (torchvision.io)
    kind: str = ""               # how they were found, for the evidence
    count: int = 0


def _is_image_path(p) -> bool:
    return isinstance(p, (str, os.PathLike)) and str(p).lower().endswith(IMAGE_SUFFIXES)


def _is_label(y) -> bool:
    """An integer: a Python int, or a 0-d integer numpy array or tensor."""
    return (isinstance(y, numbers.Integral) and not isinstance(y, bool)) or \
        (getattr(y, "ndim", None) == 0 and "int" in str(getattr(y, "dtype", "")))


def files_of(dataset, expr: str = "dataset") -> Files:
    """The Files of ``dataset``, named ``expr`` in the expressions. Raises NotFiles."""
    from torch.utils.data import IterableDataset, Subset

    if isinstance(dataset, IterableDataset):
        raise NotFiles("the dataset is iterable (DALI's file reader needs an indexable list of files)")
    if isinstance(dataset, Subset):
        inner = files_of(dataset.dataset, f"{expr}.dataset")
        # the inner list made once, then indexed (an expression in the comprehension's
        # condition would be evaluated per index)
        inner.samples = f"[pairs[i] for pairs in [{inner.samples}] for i in {expr}.indices]"
        inner.kind = f"Subset of {inner.kind}"
        inner.count = len(dataset.indices)
        return inner
    try:
        from torchvision.datasets import DatasetFolder
        from torchvision.datasets.folder import default_loader, pil_loader
    except ImportError:  # pragma: no cover - torchvision is a dependency
        DatasetFolder = ()
    if DatasetFolder and isinstance(dataset, DatasetFolder):
        if getattr(dataset, "target_transform", None) is not None:
            raise NotFiles(f"{type(dataset).__name__} has a target_transform (DALI hands over the class index)")
        if getattr(dataset, "loader", None) not in (default_loader, pil_loader):
            raise NotFiles(f"{type(dataset).__name__} opens its files with its own loader "
                           f"({getattr(dataset.loader, '__name__', dataset.loader)!r})")
        if not all(_is_image_path(p) for p, _ in dataset.samples[:64]):
            raise NotFiles(f"{type(dataset).__name__} holds files that are not images DALI decodes")
        return Files(f"{expr}.samples", dataset.transform, kind=type(dataset).__name__, count=len(dataset.samples))
    return _custom(dataset, expr)


def _custom(dataset, expr: str) -> Files:
    """A Dataset of the script's own: its paths and labels among its attributes."""
    name = type(dataset).__name__
    try:
        n = len(dataset)
    except TypeError:
        raise NotFiles(f"{name} has no len()") from None
    try:
        code = inspect.getsource(type(dataset).__getitem__)
    except (OSError, TypeError):
        raise NotFiles(f"the source of {name}.__getitem__ is not available") from None
    attrs = {k: v for k, v in vars(dataset).items() if isinstance(v, (list, tuple)) and len(v) == n and n}
    used = {k for k in attrs if re.search(rf"self\.{re.escape(k)}\b", code)}
    pairs = paths = labels = None
    for k in sorted(used):
        v = attrs[k]
        head = v[: min(n, 64)]
        if all(isinstance(s, (list, tuple)) and len(s) == 2 and _is_image_path(s[0]) and _is_label(s[1]) for s in head):
            pairs = k
        elif all(_is_image_path(p) for p in head):
            paths = k
        elif all(_is_label(y) for y in head):
            labels = k
    if pairs:
        samples = f"{expr}.{pairs}"
    elif paths and labels:
        samples = f"list(zip({expr}.{paths}, {expr}.{labels}))"
    else:
        raise NotFiles(f"{name} holds no list of image paths with integer labels that __getitem__ reads")
    if not re.search(r"Image\.open|read_image|decode_image", code):   # not cv2.imread: BGR, where DALI decodes RGB
        raise NotFiles(f"{name}.__getitem__ does not open its files with PIL or torchvision.io")
    if re.search(r"target_transform\(", code) and getattr(dataset, "target_transform", None) is not None:
        raise NotFiles(f"{name} has a target_transform (DALI hands over the label as stored)")
    gray = bool(re.search(r"""convert\(\s*['"](L|1|I|F)['"]""", code))
    tensor = bool(re.search(r"read_image|decode_image", code))
    if tensor and re.search(r"ImageReadMode\.GRAY", code):
        gray = True
    transform = getattr(dataset, "transform", None)
    if transform is None:
        transform = getattr(dataset, "transforms", None)
    if transform is not None and "transform" not in code:
        transform = None
    return Files(samples, transform, gray=gray, decoded_tensor=tensor, kind=f"{name} (paths and labels it holds)",
                 count=n)


def raw_pairs(files: Files, dataset) -> list:
    """The value of ``dataset``'s Files expression, as the dataset holds it."""
    # `dataset` a global of the expression: a comprehension does not see eval's locals
    return eval(files.samples, {"__builtins__": {"list": list, "zip": zip}, "dataset": dataset})  # noqa: S307 - our own expression


def evaluate(files: Files, dataset) -> list[tuple[str, int]]:
    """The (absolute path, int label) pairs of ``dataset`` by its Files expression."""
    return [(os.path.abspath(os.fspath(p)), int(y)) for p, y in raw_pairs(files, dataset)]


def check(dataset, pairs: list[tuple[str, int]], channels: int, size, probes: int = 2) -> str | None:
    """Why the pairs do not describe ``dataset``, or None: dataset[i] is read for a few i (the
    random state restored after) and its label and image compared with what DALI will make."""
    import torch

    from advisor.runtime.patching import making_batches, restore_rng, rng_states

    if not pairs:
        return "the dataset is empty"
    states = rng_states()
    try:
        for i in sorted({0, len(pairs) - 1})[:probes]:
            with making_batches():
                sample = dataset[i]
            if not isinstance(sample, (list, tuple)) or len(sample) != 2:
                return f"dataset[{i}] is not an (image, label) pair"
            image, label = sample
            if not _is_label(label) or int(label) != pairs[i][1]:
                return f"dataset[{i}] has label {label!r}, its file list says {pairs[i][1]}"
            if not isinstance(image, torch.Tensor) or image.dim() != 3:
                return f"dataset[{i}]'s image is a {type(image).__name__}, not a CHW tensor"
            if image.shape[0] != channels:
                return f"dataset[{i}]'s image has {image.shape[0]} channels, DALI would decode {channels}"
            if size is not None and tuple(image.shape[1:]) != tuple(size):
                return f"dataset[{i}]'s image is {tuple(image.shape[1:])}, the DALI pipeline makes {tuple(size)}"
    except Exception as e:  # noqa: BLE001 - the user's dataset: any failure refuses the fix
        return f"reading dataset samples failed: {type(e).__name__}: {e}"
    finally:
        restore_rng(states)
    return None
