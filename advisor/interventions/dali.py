"""NVIDIA DALI in place of the DataLoader's workers: files decoded (nvJPEG) and transformed on
the GPU, batches handed to the loop where they are needed.

At a DataLoader's first iteration, advisor.dali plans the pipeline from the loader itself: the
dataset's own file list and labels, its torchvision transforms mapped one by one, the loader's
batch size, shuffle and drop_last. The ``_DaliLoader`` class that plan writes (the same text
the patch puts into the script) is executed here and its batches served through the
DataLoader's own iterator class, so the loop, advisor's step hooks and the profiler's
DataLoader ranges see a DataLoader as before; its workers are never started. A loader DALI
cannot stand in for (an untranslatable transform, a sampler of its own, labels that differ
from the file list's) keeps its own batches, and the trial is reported skipped with the
reason; so is a run without DALI installed, with the command that installs it. Without a
GPU the same pipeline runs on DALI's CPU operators.
"""

from __future__ import annotations

import torch

from advisor import dali
from advisor.runtime.patching import making_batches, not_applied, served_in_process, wrap

NAME = "dali"
# The same transforms, drawn from DALI's random streams instead of torch's, and decoded and
# resized by nvJPEG and DALI's kernels instead of PIL: close, not bit-identical, batches.


def describe(params) -> str:
    return "NVIDIA DALI decodes and transforms the dataset's files on the GPU, in place of the DataLoader's workers"


def not_applicable(config, environment, params):
    dl = (config.get("dataloader") or {}).get("value")
    if dl is None:
        return "the script uses no torch DataLoader"
    seen = dl.get("dali") or {}
    if not seen.get("source"):
        return seen.get("why_not") or "the run recorded no DALI plan for its DataLoader"
    if not dali.installed():
        return f"NVIDIA DALI is not installed: {dali.install_hint(environment.get('cuda'))}"
    return None


def _take_over(loader):
    """The _DaliLoader for ``loader``, or None with the reason noted."""
    from advisor.dali import datasets, plan, source

    if not dali.installed():
        not_applied(NAME, f"NVIDIA DALI is not installed: {dali.install_hint()}")
        return None
    with making_batches():   # the checks read samples: their transforms are not the model's
        try:
            files, tr = plan.translation(loader)
        except Exception as e:  # noqa: BLE001 - NotFiles, Untranslatable and the user's dataset alike
            not_applied(NAME, str(e))
            return None
        pairs = datasets.evaluate(files, loader.dataset)
        why = datasets.check(loader.dataset, pairs, tr.channels, tr.size)
    if why:
        not_applied(NAME, why)
        return None
    namespace: dict = {}
    exec(compile(source.loader_source(tr, files), "<advisor dali fix>", "exec"), namespace)  # noqa: S102 - our own source
    made = namespace["_DaliLoader"].replacing(loader)
    if made is loader:
        not_applied(NAME, "the DataLoader's batches are not the default ones (sampler, collate_fn)")
        return None
    return made


def _serve(loader) -> None:
    from torch.utils.data.dataloader import _SingleProcessDataLoaderIter

    class FromDali(_SingleProcessDataLoaderIter):
        """The loader's iterator class, its batches taken from one DALI epoch."""

        def __init__(self, batches):
            super().__init__(loader)
            self._batches = batches

        def _next_data(self):
            return next(self._batches)   # StopIteration ends the epoch

    real = loader._get_iterator
    made: list = []

    def _get_iterator():
        if not made:
            made.append(_take_over(loader))
            if made[0] is not None:
                served_in_process(loader)
        if made[0] is None:
            return real()
        return FromDali(iter(made[0]))

    loader._get_iterator = _get_iterator


def apply(params) -> None:
    def make(orig):
        def __init__(self, *args, **kwargs):
            orig(self, *args, **kwargs)
            _serve(self)
        return __init__

    wrap(torch.utils.data.DataLoader, "__init__", make)
