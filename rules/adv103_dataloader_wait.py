"""The GPU waits for the DataLoader.

What it does:
    Measures the part of each step in which the training loop is blocked in the
    DataLoader's ``__next__`` while no GPU work runs (``data_wait`` in the breakdown), and
    reads the observed DataLoader settings (num_workers, pin_memory, persistent_workers,
    prefetch_factor).

Why is this bad:
    Every millisecond spent waiting for the next batch is a millisecond the accelerator
    idles. The old TensorBoard profiler plugin flagged loader time above 5% of the step;
    XProf calls 20% or more "highly input-bound".

Example:
    loader = DataLoader(dataset, batch_size=256, shuffle=True)   # num_workers=0: decode in the loop

Fix:
    Load in parallel worker processes and keep them alive across epochs:
    DataLoader(dataset, batch_size=256, shuffle=True, num_workers=8,
               persistent_workers=True, prefetch_factor=4, pin_memory=True)
    If the per-sample work is heavy (JPEG decode, resize), do it once offline or decode on
    the GPU (NVIDIA DALI).

Fix safety:
    Safe: the same samples in the same order per seed (each worker seeds its own RNG, so
    random augmentations differ from a single-process run, as with any worker count).
"""

import os

from ._common import dali_feeds, fix, ms, pct, phase_ms, step_ms

CODE = "ADV103"
NAME = "dataloader-wait"
SEVERITY = "warning"
NEEDS = ("steps",)
FIX = "dataloader-workers"
HITS = ("slow_loader",)
NON_HITS = {"gpu_run_h100_cifar_tuned_graphs": "batches gathered on the GPU: no DataLoader to wait for",
            "gpu_resident_resnet50_cl": "batches already on the GPU: no loader in the step",
            "imagefolder_dali_h200": "the batches come from DALI: more workers change nothing"}


def check(ctx):
    if dali_feeds(ctx):
        return None
    total = step_ms(ctx)
    wait = phase_ms(ctx, "data_wait")
    if not total or wait / total < ctx.thresholds.data_wait_frac:
        return None
    dl = ctx.value("dataloader") or {}
    workers = dl.get("num_workers")
    cpus = ctx.environment.get("cpu_count") or os.cpu_count() or 1
    suggested = max(2, min(8, cpus))
    severity = "error" if wait / total >= ctx.thresholds.data_wait_frac_error else "warning"
    evidence = [f"data wait: {ms(wait)} of a {ms(total)} step ({pct(wait / total)})"]
    if dl:
        evidence.append(f"DataLoader: num_workers={workers}, pin_memory={dl.get('pin_memory')}, "
                        f"persistent_workers={dl.get('persistent_workers')}, prefetch_factor={dl.get('prefetch_factor')}")
    if dl.get("dataset_type"):
        evidence.append(f"dataset: {dl['dataset_type']}" + (f", transforms: {dl['transforms']}" if dl.get("transforms") else ""))
    msg = f"The step waits {pct(wait / total)} of its time for the next batch."
    if workers:
        msg += f" More than num_workers={workers} are needed, or lighter per-sample work."
    return {
        "severity": severity,
        "message": msg,
        "evidence": evidence,
        "estimated_gain_ms": wait,
        "fix": fix("dataloader-workers", changes_numerics=False, where=ctx.where("dataloader"),
                   num_workers=suggested,
                   code=f"DataLoader(..., num_workers={suggested}, persistent_workers=True, prefetch_factor=4, pin_memory=True)"),
    }
