"""The samples precompute-samples and preload-dataset make, made once per analyze: the first
trial process that computes a dataset's samples saves them, and the next trials of the same
dataset load them instead of computing them again (a generated dataset's preload can take most
of every trial's start-up: docs/trials.md, "Samples: computed once per analyze").

A dataset is known by its class, its length and the content of samples spread over it
(``fingerprint``): a dataset built differently in another process (another seed, other
files) reads other samples and computes its own. The directory is the run's scratch
(``ENV``, set in the trial processes' environment: specs.trial_spec); the plain-python run of
fixes.patch never sees it, and pays the computing as the user's run will.

Each process notes what computing the samples cost and what loading or saving them took
(``events``, child.json ``samples_cache``): a process that loaded them counts its one-off cost
as if it had computed them, and the one that saved them leaves the saving out
(measure.samples_cache_s), so the patch's payback is judged on the user's cost, not the cache's.
Each is the process's own time, as its lead-in is (runner/startup.py): its main thread's wait
for a core left out, or a build timed in a guess niced beside another trial would be charged to
every trial that loads it.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import time

import torch

ENV = "ADVISOR_SAMPLES_CACHE"
PROBES = 16
_events: list[dict] = []


def _clock() -> tuple[float, float | None]:
    from advisor.runtime.schedstat import cpu_wait_s

    return time.perf_counter(), cpu_wait_s()


def _own_s(since: tuple[float, float | None]) -> float:
    """Seconds since ``since`` (_clock), less the main thread's wait for a core meanwhile."""
    from advisor.runtime.schedstat import cpu_wait_s

    t0, w0 = since
    wall, w1 = time.perf_counter() - t0, cpu_wait_s()
    waited = w1 - w0 if w0 is not None and w1 is not None else 0.0
    return round(max(0.0, wall - waited), 3)


def events() -> list[dict]:
    """This process's use of the cache: {"kind", "built_s", and "loaded_s" or "saved_s"}."""
    return list(_events)


def _feed(h, sample) -> bool:
    """sample's content into the hash h; False for a value it cannot read (not cached then)."""
    if isinstance(sample, torch.Tensor):
        t = sample.detach().cpu().contiguous()
        h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        return True
    if isinstance(sample, (list, tuple)):
        h.update(f"{type(sample).__name__}{len(sample)}".encode())
        return all(_feed(h, x) for x in sample)
    if isinstance(sample, dict):
        h.update(f"D{len(sample)}".encode())
        return all(_feed(h, k) and _feed(h, v) for k, v in sample.items())
    if isinstance(sample, (int, float, str, bytes, bool)) or sample is None:
        h.update(f"{type(sample).__name__}:{sample!r}".encode())
        return True
    if type(sample).__module__ == "numpy" and hasattr(sample, "tobytes"):
        h.update(f"N{sample.dtype}{getattr(sample, 'shape', ())}".encode())
        h.update(sample.tobytes())
        return True
    return False


def fingerprint(dataset) -> str | None:
    """The dataset's class, length and PROBES samples spread over it, hashed; None when a
    sample holds a value it cannot read. The caller restores the random generators. Read once
    per dataset object (the object is kept, so its id is not reused)."""
    seen = _fingerprints.get(id(dataset))
    if seen is not None and seen[0] is dataset:
        return seen[1]
    key = _fingerprint(dataset)
    _fingerprints[id(dataset)] = (dataset, key)
    return key


_fingerprints: dict[int, tuple] = {}


def built_seconds(dataset) -> float | None:
    """The seconds an earlier trial of this analyze took to compute this dataset's samples: its
    measurement, where a refusal would otherwise read a new estimate from a few samples, which
    near the limit flips from trial to trial (docs/trials.md); None when none did, or outside a
    trial."""
    root = os.environ.get(ENV)
    key = fingerprint(dataset) if root else None
    if key is None or not os.path.isdir(root):
        return None
    took = [_read_seconds(os.path.join(root, f)) for f in os.listdir(root) if f.endswith(f"-{key}.json")]
    took = [t for t in took if t is not None]
    return max(took) if took else None


def _read_seconds(path: str) -> float | None:
    try:
        with open(path, encoding="utf-8") as f:
            return float(json.load(f)["built_s"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _fingerprint(dataset) -> str | None:
    n = len(dataset)
    h = hashlib.blake2b(digest_size=20)
    h.update(f"{type(dataset).__module__}.{type(dataset).__qualname__}:{n}".encode())
    for i in sorted({int(k * (n - 1) / max(1, PROBES - 1)) for k in range(PROBES)}):
        if not _feed(h, dataset[i]):
            return None
    return h.hexdigest()


def cached(dataset, kind: str, build):
    """build() (the dataset's samples, in the form ``kind`` names), from the run's cache when an
    earlier process of the analyze saved them, else built and saved there. Without the cache
    directory (not a trial), build()."""
    root = os.environ.get(ENV)
    key = fingerprint(dataset) if root else None
    if key is None:
        return build()
    path = os.path.join(root, f"{kind}-{key}.pt")
    if os.path.exists(path):
        t0 = _clock()
        try:
            got = torch.load(path, weights_only=False)   # advisor's own file, in its run directory
        except Exception:
            got = None   # a partial or unreadable file: computed again below
        if got is not None:
            _events.append({"kind": kind, "built_s": got["built_s"], "loaded_s": _own_s(t0)})
            return got["value"]
    t0 = _clock()
    value = build()
    built_s = _own_s(t0)
    t0 = _clock()
    try:
        os.makedirs(root, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        torch.save({"value": value, "built_s": built_s}, tmp, pickle_protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)   # whole or absent: another process may be loading it
        with open(f"{tmp}.json", "w", encoding="utf-8") as f:   # what computing them took (built_seconds)
            json.dump({"built_s": built_s}, f)
        os.replace(f"{tmp}.json", path.removesuffix(".pt") + ".json")
    except OSError:
        return value   # a full disk costs the next process the build, not this run
    _events.append({"kind": kind, "built_s": built_s, "saved_s": _own_s(t0)})
    return value
