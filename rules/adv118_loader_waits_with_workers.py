"""The loop still waits for batches although the DataLoader has workers.

What it does:
    Reads the data waits of the timed (unprofiled) window: the time the training loop was
    blocked in the DataLoader's ``__next__``, summed over whole epochs, and the longest single
    wait (an epoch start, where a worker must make a fresh batch). Fires when the loader
    already has worker processes and the loop still waits.

Why is this bad:
    Workers hide per-sample work only while they stay ahead of the loop. Each epoch starts
    with an empty queue, and heavy per-sample work (decoding, dtype conversion,
    normalization) is redone every epoch: a loader whose few workers keep up inside an epoch
    still waits many steps' time at each epoch start.

Example:
    class Images(Dataset):
        def __getitem__(self, i):          # the same work for sample i every epoch
            return (self.images[i].float() / 255 - self.mean) / self.std, self.labels[i]

Fix:
    Do deterministic per-sample work once, before training (out-of-band preprocessing).
    When the converted samples fit in a quarter of the free GPU memory, preload them there,
    collated into tensors, and let each batch be one gather with the loader's own sampler
    (``preload-dataset``: no workers, pinning or copies left; the airbench CIFAR-10 recipe
    does this). Otherwise store them in host memory so the workers only collate
    (``precompute-samples``, trialled when preloading is refused), or keep uint8 and
    normalize on the GPU, per batch. Random augmentations must stay per epoch: move them
    to the GPU (or NVIDIA DALI) instead; until then, when the dataset's transforms are
    random (torchvision's Random*, *Augment, ColorJitter), the fix trialled is twice the
    workers, up to the host's cores (``dataloader-workers``), again on each kept stack while
    the loop still waits. Once the workers hold every core, a dataset of image files on a
    GPU machine is ADV119's (decode and augment on the GPU with DALI).

Fix safety:
    Safe when every read of a sample gives the same result: advisor's trial checks that on
    8 samples and refuses datasets with random transforms, custom collate functions, or
    samples too large to store. The batches are the same tensors in the same order.
"""

import re

from ._common import dali_feeds, fix, ms, pct, phase_ms, step_ms

CODE = "ADV118"
NAME = "loader-waits-with-workers"
SEVERITY = "warning"
NEEDS = ("steps",)
FIX = "preload-dataset"
# It fires only once the loader has workers: while their trial runs, advisor starts the
# preload's process ahead (advisor.guesses).
AFTER = ("dataloader-workers",)
HITS = ("gpu_run_h100_cifar_workers",)
NON_HITS = {"slow_loader": "num_workers=0: more workers come first (ADV103)",
            "gpu_run_h100_cifar_slow": "num_workers=0 in the slow recipe's baseline (ADV103)",
            "imagefolder_workers16_h200": "JPEGs augmented per epoch, workers on every core: ADV119 (DALI)",
            "imagefolder_dali_h200": "the batches come from DALI, not from the DataLoader's workers"}

# A torchvision transform that draws anew each time it runs: its samples cannot be stored once
# (preload-dataset and precompute-samples refuse them on a read twice), so more workers make
# them instead, up to the host's cores (JPEG decoding and random crops in a few workers can
# keep the loop waiting most of its window: docs/measurement.md).
RANDOM_TRANSFORM = re.compile(r"Random|Augment|AugMix|ColorJitter|GaussianBlur|ElasticTransform")


def _more_workers(ctx, random_transform, workers: int) -> int | None:
    """Twice the workers, up to the host's cores, when the transforms are random; else None."""
    cpus = int(ctx.environment.get("cpu_count") or 0)
    if not random_transform or cpus <= workers:
        return None
    return min(cpus, 2 * workers)


def check(ctx):
    if dali_feeds(ctx):
        return None
    dl = ctx.value("dataloader") or {}
    workers = dl.get("num_workers") or 0
    measured = ctx.analysis.get("measured") or {}
    frac = float(measured.get("data_wait_frac") or 0.0)
    if workers < 1 or frac < ctx.thresholds.data_wait_frac:
        return None
    total = step_ms(ctx)
    profiled = phase_ms(ctx, "data_wait") / total if total else 0.0
    # Waits inside the profiled steps too: the workers never keep up. Only in the window:
    # epoch starts (and stragglers) the profiled steps happened to miss, worth a warning
    # once they cost what XProf calls highly input-bound (epoch starts alone can cost that:
    # docs/measurement.md).
    t = ctx.thresholds
    severity = "warning" if profiled >= t.data_wait_frac or frac >= t.data_wait_frac_error else "info"
    per_step = float(measured.get("data_wait_ms_per_step") or 0.0)
    random_transform = RANDOM_TRANSFORM.search(str(dl.get("transforms") or ""))
    more = _more_workers(ctx, random_transform, workers)
    if random_transform and not more and (dl.get("dali") or {}).get("images") and ctx.environment.get("gpu_count"):
        return None   # image files, augmented per epoch, workers on every core: ADV119 (decode on the GPU)
    if more:
        the_fix = fix("dataloader-workers", changes_numerics=False, where=ctx.where("dataloader"),
                      code=f"DataLoader(..., num_workers={more}, persistent_workers=True, prefetch_factor=4, "
                           "pin_memory=True)   # random transforms: made per epoch, by more workers",
                      num_workers=more, pin_memory=bool(ctx.environment.get("gpu_count")))
    else:
        the_fix = _preload_fix(ctx)
    return {
        "severity": severity,
        "message": (f"With num_workers={workers} the loop still waits {pct(frac)} of the timed window for batches "
                    f"(longest wait {ms(measured.get('longest_data_wait_ms') or 0.0)})."),
        "evidence": [f"timed window: {measured.get('steps')} steps, {ms(per_step)} of data wait per step "
                     f"of {ms(measured.get('step_ms') or 0.0)}",
                     f"profiled steps: {pct(profiled)} data wait",
                     f"DataLoader: num_workers={workers}, persistent_workers={dl.get('persistent_workers')}, "
                     f"prefetch_factor={dl.get('prefetch_factor')}"
                     + (f"; dataset: {dl['dataset_type']}" if dl.get("dataset_type") else "")]
                    + ([f"random transforms ({random_transform.group(0)}...): "
                        f"stored samples would freeze them; {more} workers make them instead"] if more else []),
        "estimated_gain_ms": per_step,
        "fix": the_fix,
        "alternatives": ["precompute-samples", "uint8-inputs"] if not more else ["gpu-augmentation", "dali"],
    }


def _preload_fix(ctx) -> dict:
    return fix("preload-dataset", changes_numerics=False, where=ctx.where("dataloader"),
               code="class Preloaded(Dataset):   # every sample once, on the GPU (deterministic work only)\n"
                    "    def __init__(self, ds):\n"
                    "        self.data = tree_map(lambda t: t.to('cuda'), default_collate([ds[i] for i in range(len(ds))]))\n"
                    "        self.n = len(ds)\n"
                    "    def __len__(self):\n"
                    "        return self.n\n"
                    "    def __getitems__(self, idx):   # a whole batch's indices: one gather\n"
                    "        i = torch.as_tensor(idx).pin_memory().to('cuda', non_blocking=True)\n"
                    "        return tree_map(lambda t: t[i], self.data)\n\n"
                    "loader = DataLoader(Preloaded(dataset), ..., collate_fn=lambda batch: batch)   # same batch_size, shuffle")
