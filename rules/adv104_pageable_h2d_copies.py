"""Host-to-device copies from pageable memory.

What it does:
    Counts the bytes per step copied host→device from pageable (not page-locked) memory,
    read from the trace's ``Memcpy HtoD (Pageable -> Device)`` events.

Why is this bad:
    A pageable copy is staged through a driver bounce buffer and is synchronous with the
    host: it runs at a fraction of PCIe/NVLink bandwidth and blocks the training loop, so it
    cannot overlap with compute.

Example:
    loader = DataLoader(dataset, batch_size=256)          # pin_memory=False
    x = x.to("cuda")                                      # pageable, blocking

Fix:
    Pin the batches in the loader and copy asynchronously:
    loader = DataLoader(dataset, batch_size=256, pin_memory=True)
    x = x.to("cuda", non_blocking=True)

Fix safety:
    Safe: the same bytes arrive; copies overlap with compute instead of blocking.
"""

from ._common import fix, h2d, mib, ms

CODE = "ADV104"
NAME = "pageable-h2d-copies"
SEVERITY = "warning"
NEEDS = ("gpu",)
FIX = "pin-memory"
HITS = ("fp32_nchw",)
NON_HITS = {"amp_bf16_channels_last": "pin_memory=True and non_blocking copies"}


def check(ctx):
    info = h2d(ctx)
    pageable = float(info.get("pageable_bytes") or 0.0)
    if pageable < ctx.thresholds.pageable_h2d_bytes:
        return None
    copy_ms = float(info.get("pageable_ms") or info.get("ms") or 0.0)
    dl = ctx.value("dataloader") or {}
    copy = ctx.value("h2d_copy") or {}
    evidence = [f"pageable HtoD: {mib(pageable)} per step in {ms(copy_ms)}"]
    if info.get("pinned_bytes"):
        evidence.append(f"pinned HtoD: {mib(info['pinned_bytes'])} per step")
    if dl:
        evidence.append(f"DataLoader pin_memory={dl.get('pin_memory')}")
    if copy:
        evidence.append(f"copy non_blocking={copy.get('non_blocking')}" + (f" at {ctx.where('h2d_copy')}" if ctx.where("h2d_copy") else ""))
    return {
        "message": f"{mib(pageable)} per step is copied to the GPU from pageable memory, blocking the loop.",
        "evidence": evidence,
        "estimated_gain_ms": copy_ms,
        "fix": fix("pin-memory", changes_numerics=False, where=ctx.where("dataloader"),
                   code="DataLoader(..., pin_memory=True)\nx = x.to(device, non_blocking=True)"),
    }
