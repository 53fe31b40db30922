"""Precompute a map-style Dataset's samples once, before training (out-of-band preprocessing).

When every ``dataset[i]`` is the same each time it is asked for (no random augmentation),
the per-sample work (decoding, dtype conversion, normalization) can be done once instead
of once per epoch: the DataLoader then serves stored samples, and its workers only collate.
Applied at DataLoader construction, in the main process, so forked workers share the
samples. Refused, with the reason noted, for iterable datasets, samples that differ
between two reads (checked on 8 indices), or a dataset estimated to need more than
``max_bytes`` or ``max_seconds``. The random number generators are restored after the
checks and after the pass, so the script's own random stream is what it would have been.
"""

from __future__ import annotations

import time

import torch

from advisor.host import usable_cpus
from advisor.interventions import samples_cache
from advisor.runtime import SAMPLES_VARY, samples_source
from advisor.runtime.patching import making_batches, not_applied, restore_rng, rng_states, source_functions, wrap

NAME = "precompute-samples"
MAX_BYTES = 4 << 30
MAX_SECONDS = 60.0
PROBES = 8


def describe(params) -> str:
    return "Dataset samples computed once before training (out-of-band preprocessing)"


def not_applicable(config, environment, params):
    dl = (config.get("dataloader") or {}).get("value")
    if dl is None:
        return "the script uses no torch DataLoader"
    return samples_vary(config)


def samples_vary(config) -> str | None:
    """The refusal an earlier trial's run found in the dataset (a sample read twice differs:
    config "samples", learned by the ladder), else None."""
    samples = (config.get("samples") or {}).get("value") or {}
    if samples.get("repeatable") is False:
        return f"{samples.get('why')} (found by trial {samples.get('found_by')})"
    return None


class Precomputed(torch.utils.data.Dataset):
    """The stored samples of ``source``; other attributes are read from ``source``."""

    def __init__(self, source, samples: list):
        self._source = source
        self._samples = samples

    def __len__(self) -> int:
        return len(self._samples)

    def __getitem__(self, i):
        return self._samples[i]

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._source, name)


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b))
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (int, float, str, bytes, bool)) or a is None:
        return a == b
    try:
        import numpy as np

        if isinstance(a, np.ndarray):
            return isinstance(b, np.ndarray) and a.shape == b.shape and bool(np.array_equal(a, b))
    except ImportError:
        pass
    return False  # an object we cannot compare: do not assume it is repeatable


def _nbytes(sample) -> int:
    if isinstance(sample, torch.Tensor):
        return sample.element_size() * sample.nelement()
    if isinstance(sample, (list, tuple)):
        return sum(_nbytes(x) for x in sample) + 64
    if isinstance(sample, dict):
        return sum(_nbytes(x) for x in sample.values()) + 64
    return getattr(sample, "nbytes", 64)


def plan(dataset, max_bytes: int = MAX_BYTES, max_seconds: float = MAX_SECONDS) -> str | None:
    """Why this dataset cannot be precomputed, or None when it can."""
    if isinstance(dataset, (torch.utils.data.IterableDataset, Precomputed)) or not hasattr(dataset, "__getitem__"):
        return "the dataset is not a map-style Dataset"
    try:
        n = len(dataset)
    except TypeError:
        return "the dataset has no length"
    if n == 0:
        return "the dataset is empty"
    probes = sorted({int(i * (n - 1) / max(1, PROBES - 1)) for i in range(PROBES)})
    states = rng_states()  # the probes' random draws are not the script's
    try:
        t0 = time.perf_counter()
        for i in probes:
            if not _same(dataset[i], dataset[i]):
                return f"dataset[{i}] {SAMPLES_VARY}: precomputing would freeze them"
        per_sample = (time.perf_counter() - t0) / (2 * len(probes))
        size = _nbytes(dataset[probes[0]]) * n
        # measured by an earlier trial of the analyze, else estimated from the probes
        took = samples_cache.built_seconds(dataset) if size <= max_bytes else None
    finally:
        restore_rng(states)
    if size > max_bytes:
        return f"the samples would take ~{size / (1 << 30):.1f} GiB (limit {max_bytes / (1 << 30):.0f} GiB)"
    if took is not None and took > max_seconds:
        return f"computing every sample took {took:.0f} s in an earlier trial (limit {max_seconds:.0f} s)"
    estimate = per_sample * n / samples_source.processes(n, usable_cpus())
    if took is None and estimate > max_seconds:
        return f"computing every sample would take ~{estimate:.0f} s (limit {max_seconds:.0f} s)"
    return None


def every_sample(dataset) -> list:
    """dataset[i] for every i, in order, over several forked processes as the patch computes
    them (runtime/samples_source.py; the caller restores the random generators)."""
    return source_functions("import torch\n\n\n" + samples_source.SOURCE, f"{NAME} fix")["_every_sample"](dataset)


def precompute(dataset) -> Precomputed:
    """Every sample, computed once (or loaded: an earlier trial of this analyze computed them,
    samples_cache); the random generators are left as they were found."""
    states = rng_states()
    try:
        return Precomputed(dataset, samples_cache.cached(dataset, "samples", lambda: every_sample(dataset)))
    finally:
        restore_rng(states)


def apply(params) -> None:
    max_bytes = int(params.get("max_bytes", MAX_BYTES))
    max_seconds = float(params.get("max_seconds", MAX_SECONDS))

    def make(orig):
        def __init__(self, *args, **kwargs):
            in_kwargs = "dataset" in kwargs
            dataset = kwargs["dataset"] if in_kwargs else (args[0] if args else None)
            if dataset is not None:
                with making_batches():  # the transforms' module calls are not the model's
                    why = plan(dataset, max_bytes, max_seconds)
                    if why is None:
                        dataset = precompute(dataset)
                if why is None:
                    if in_kwargs:
                        kwargs["dataset"] = dataset
                    else:
                        args = (dataset, *args[1:])
                else:
                    not_applied(NAME, why)
            return orig(self, *args, **kwargs)
        return __init__

    wrap(torch.utils.data.DataLoader, "__init__", make)
