"""Can DALI stand in for this DataLoader, and with what code: ``plan(loader)``.

Asked for every DataLoader the script makes (the runner's observation records the answer in
the run's config, where the rule, the trial's applicability and the patch read it) and again
by the dali fix at run time. Nothing here imports DALI: the plan is text and reasons.
"""

from __future__ import annotations

import os
import time

from .datasets import Files, NotFiles, files_of, raw_pairs
from .source import loader_source
from .transforms import Translation, Untranslatable, flatten, translate

PROBES = 4   # samples timed for the evidence (decode and transforms, in the main process)


def _sampling(loader) -> str | None:
    """Why the DataLoader's batches are not ones DALI's reader makes, or None."""
    import torch

    data = torch.utils.data
    if loader.batch_size is None:
        return "the DataLoader has batch_size=None"
    if type(loader.batch_sampler) is not data.BatchSampler:
        return f"the DataLoader has its own batch sampler ({type(loader.batch_sampler).__name__})"
    if type(loader.sampler) not in (data.RandomSampler, data.SequentialSampler) or \
            getattr(loader.sampler, "replacement", False) or getattr(loader.sampler, "_num_samples", None):
        return f"the DataLoader has its own sampler ({type(loader.sampler).__name__})"
    if loader.collate_fn is not data.default_collate:
        return "the DataLoader has its own collate_fn"
    return None


def translation(loader) -> tuple[Files, Translation]:
    """The dataset's files and the DALI translation of its transforms. Raises NotFiles or
    Untranslatable with the reason."""
    why = _sampling(loader)
    if why:
        raise NotFiles(why)
    files = files_of(loader.dataset)
    tr = translate(files.transform, gray=files.gray, decoded_tensor=files.decoded_tensor)
    return files, tr


def plan(loader, probe: bool = True) -> dict:
    """What the config records of a DataLoader for DALI: {"why_not"} for a dataset that is not
    image files; {"images", "kind", "files", "why_not"} for image files DALI cannot take over;
    else {"images", "kind", "files", "source", "mapping", "random", "transforms"}: the class
    the fix runs and writes and the transform -> operator table. With ``probe``, "cost": the
    measured cost of a sample in the dataset, as a worker makes it."""
    try:
        files = files_of(loader.dataset)
    except NotFiles as e:
        return {"why_not": str(e)}
    out = {"images": True, "kind": files.kind, "files": files.count}
    if probe:
        out["cost"] = sample_cost(loader.dataset, files)
    try:
        files, tr = translation(loader)
    except (NotFiles, Untranslatable) as e:
        return {**out, "why_not": str(e)}
    return {**out, "source": loader_source(tr, files), "mapping": [list(m) for m in tr.mapping],
            "random": tr.random, "transforms": len(flatten(files.transform))}


def sample_cost(dataset, files: Files, n: int = PROBES) -> dict | None:
    """Milliseconds a sample costs in the dataset (median of ``n``), and of that the file's
    opening and decoding by PIL; the random state is restored after, and the transforms'
    module calls are the data pipeline's, not the model's (making_batches)."""
    from advisor.runtime.patching import making_batches, restore_rng, rng_states

    states = rng_states()
    try:
        with making_batches():
            return _timed(dataset, files, n)
    except Exception:  # noqa: BLE001 - evidence only: a dataset that fails here fails in the trial with its reason
        return None
    finally:
        restore_rng(states)


def _median_ms(seconds: list[float]) -> float | None:
    return round(sorted(seconds)[len(seconds) // 2] * 1e3, 3) if seconds else None


def _timed(dataset, files: Files, n: int) -> dict | None:
    # the pairs as held, only the probed ones read: the observer plans every DataLoader of every
    # run, and a full list of paths made absolute costs seconds for ImageNet's 1.28M files
    pairs = raw_pairs(files, dataset)
    item, decode = [], []
    for i in [int(k * len(pairs) / n) for k in range(n)] if pairs else []:
        t0 = time.perf_counter()
        dataset[i]
        item.append(time.perf_counter() - t0)
        if not files.decoded_tensor:
            from PIL import Image

            t0 = time.perf_counter()
            with open(os.fspath(pairs[i][0]), "rb") as f:
                Image.open(f).convert("L" if files.gray else "RGB")
            decode.append(time.perf_counter() - t0)
    if not item:
        return None
    return {"item_ms": _median_ms(item), "decode_ms": _median_ms(decode), "samples": len(item)}
