"""The loop still waits for batches although the DataLoader has workers.

What it does:
    Reads the data waits of the timed (unprofiled) window: the time the training loop was
    blocked in the DataLoader's ``__next__``, summed over whole epochs, and the longest single
    wait (an epoch start, where a worker must make a fresh batch). Fires when the loader
    already has worker processes and the loop still waits.

Why is this bad:
    Workers hide per-sample work only while they stay ahead of the loop. Each epoch starts
    with an empty queue, and heavy per-sample work (decoding, dtype conversion,
    normalization) is redone every epoch: on an H100 the slow CIFAR recipe with 4 workers
    stepped in 12-17 ms inside an epoch and waited 150-260 ms at each epoch start.

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
    to the GPU (or NVIDIA DALI) instead.

Fix safety:
    Safe when every read of a sample gives the same result: advisor's trial checks that on
    8 samples and refuses datasets with random transforms, custom collate functions, or
    samples too large to store. The batches are the same tensors in the same order.
"""

from ._common import fix, ms, pct, phase_ms, step_ms

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
            "gpu_run_h100_cifar_slow": "num_workers=0 in the slow recipe's baseline (ADV103)"}


def check(ctx):
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
    # once they cost what XProf calls highly input-bound (an H100 CIFAR run with 8 workers
    # lost 38% of its window to ~100 ms waits at each of its 24-step epochs).
    t = ctx.thresholds
    severity = "warning" if profiled >= t.data_wait_frac or frac >= t.data_wait_frac_error else "info"
    per_step = float(measured.get("data_wait_ms_per_step") or 0.0)
    return {
        "severity": severity,
        "message": (f"With num_workers={workers} the loop still waits {pct(frac)} of the timed window for batches "
                    f"(longest wait {ms(measured.get('longest_data_wait_ms') or 0.0)})."),
        "evidence": [f"timed window: {measured.get('steps')} steps, {ms(per_step)} of data wait per step "
                     f"of {ms(measured.get('step_ms') or 0.0)}",
                     f"profiled steps: {pct(profiled)} data wait",
                     f"DataLoader: num_workers={workers}, persistent_workers={dl.get('persistent_workers')}, "
                     f"prefetch_factor={dl.get('prefetch_factor')}"
                     + (f"; dataset: {dl['dataset_type']}" if dl.get("dataset_type") else "")],
        "estimated_gain_ms": per_step,
        "fix": fix("preload-dataset", changes_numerics=False, where=ctx.where("dataloader"),
                   code="class Preloaded(Dataset):   # every sample once, on the GPU (deterministic work only)\n"
                        "    def __init__(self, ds):\n"
                        "        self.data = tree_map(lambda t: t.to('cuda'), default_collate([ds[i] for i in range(len(ds))]))\n"
                        "        self.n = len(ds)\n"
                        "    def __len__(self):\n"
                        "        return self.n\n"
                        "    def __getitems__(self, idx):   # a whole batch's indices: one gather\n"
                        "        i = torch.as_tensor(idx).pin_memory().to('cuda', non_blocking=True)\n"
                        "        return tree_map(lambda t: t[i], self.data)\n\n"
                        "loader = DataLoader(Preloaded(dataset), ..., collate_fn=lambda batch: batch)   # same batch_size, shuffle"),
        "alternatives": ["precompute-samples", "uint8-inputs"],
    }
