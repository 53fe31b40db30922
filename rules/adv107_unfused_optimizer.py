"""The optimizer updates parameters one kernel at a time.

What it does:
    Counts kernels per step launched inside ``optimizer.step()`` and their time, and reads
    the observed optimizer class with its ``foreach``/``fused`` flags.

Why is this bad:
    The per-parameter loop (``foreach=False``) launches several small kernels for each
    parameter tensor: hundreds of launches of a few microseconds each, dominated by launch
    overhead. ``foreach`` batches them into multi-tensor kernels; ``fused`` does the whole
    update in one pass.

Example:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=False)

Fix:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, fused=True)
    (``foreach=True`` where ``fused`` is not supported by the optimizer or device.)

Fix safety:
    Safe: the same update rule; results equal up to floating-point summation order.
"""

from ._common import fix, ms, phase_ms

CODE = "ADV107"
NAME = "unfused-optimizer"
SEVERITY = "warning"
NEEDS = ("gpu",)
FIX = "fused-optimizer"
HITS = ("fp32_nchw",)
NON_HITS = {"amp_bf16_channels_last": "SGD(fused=True): a handful of multi-tensor kernels"}


def check(ctx):
    count = float((ctx.analysis.get("phase_kernel_count") or {}).get("optimizer") or 0.0)
    opt = ctx.value("optimizer") or {}
    if opt.get("fused"):
        return None
    if count < ctx.thresholds.optimizer_kernels_per_step:
        return None
    opt_ms = phase_ms(ctx, "optimizer")
    name = opt.get("class", "the optimizer")
    evidence = [f"{count:.0f} kernels per step inside optimizer.step, {ms(opt_ms)} per step"]
    if opt:
        evidence.append(f"{name}(foreach={opt.get('foreach')}, fused={opt.get('fused')})")
    return {
        "message": f"{name}.step launches {count:.0f} small kernels per step; a fused update needs a few.",
        "evidence": evidence,
        "estimated_gain_ms": opt_ms,
        "fix": fix("fused-optimizer", changes_numerics=False, where=ctx.where("optimizer"),
                   code=f"torch.optim.{opt.get('class', 'SGD')}(params, ..., fused=True)"),
    }
