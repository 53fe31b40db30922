"""The dali fix as source: the ``_DaliLoader`` class the trial ran, at module level, and the
training DataLoader handed to it: ``loader = _DaliLoader.replacing(DataLoader(...))``.

The class text is the run's own (config ``dataloader.dali.source``, written by the child from
the script's dataset and transforms: advisor.dali), so the patch does what the trial measured.
The DataLoader call stays as it was, with whatever other fixes set on it: ``replacing`` hands
it back unchanged where DALI cannot stand in for it (a sampler of its own, in a distributed
run), and its workers are then the ones that run.
"""

from __future__ import annotations

import libcst as cst

from .core import PatchContext, SkipFix, applied, location
from .loader_fixes import _dataloader_call
from .placement import define_before, hand_to


def dali(ctx: PatchContext, fix: dict, p: dict) -> dict:
    f, call = _dataloader_call(ctx, fix)
    here = location(f, f.line_of(call))
    seen = ((ctx.config.get("dataloader") or {}).get("value") or {}).get("dali") or {}
    source = seen.get("source")
    if not source:
        raise SkipFix(seen.get("why_not") or f"the run recorded no DALI pipeline for the DataLoader at {here}")
    if any(isinstance(s, cst.ClassDef) and s.name.value == "_DaliLoader" for s in f.module.body):
        raise SkipFix(f"{f.rel} already defines _DaliLoader")
    define_before(ctx, f, call, source)
    swap = hand_to(ctx, f, call, "_DaliLoader.replacing")
    mapping = [f"{a} -> {b}" for a, b in seen.get("mapping") or []]
    return applied(here, ["class _DaliLoader (at module level): the dataset's files decoded and transformed "
                          "on the GPU by NVIDIA DALI", f"DataLoader(...) at {here}: {swap}", *mapping],
                   changes_numerics=True,
                   warning="needs NVIDIA DALI (pip install nvidia-dali-cuda120, or nvidia-dali-cuda130 for a CUDA 13 "
                           "build of torch); the augmentations draw from DALI's random streams")

