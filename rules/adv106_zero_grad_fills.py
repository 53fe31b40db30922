"""zero_grad writes zeros into every gradient.

What it does:
    Measures GPU time of fill and memset kernels launched inside ``optimizer.zero_grad()``
    (``FillFunctor`` elementwise kernels on torch 2.x, or ``Memset``), and reads the observed
    ``set_to_none`` argument.

Why is this bad:
    ``zero_grad(set_to_none=False)`` launches one fill per parameter every step and the
    backward then adds into zeros instead of writing fresh gradients: pure memory traffic,
    every step.

Example:
    optimizer.zero_grad(set_to_none=False)

Fix:
    optimizer.zero_grad(set_to_none=True)   # the default since PyTorch 2.0

Fix safety:
    Safe for standard optimizers: a None gradient is treated as zero. Code that reads
    ``p.grad`` before backward (e.g. gradient accumulation checks) must handle None.
"""

from ._common import class_ms_per_step, fix, ms, pct, step_ms

CODE = "ADV106"
NAME = "zero-grad-fills"
SEVERITY = "warning"
NEEDS = ("gpu",)
FIX = "set-to-none"
HITS = ("fp32_nchw",)
NON_HITS = {"amp_bf16_channels_last": "set_to_none=True: no fills"}


def check(ctx):
    fill = class_ms_per_step(ctx, "fill_memset", ("zero_grad",))
    total = float(ctx.analysis.get("gpu_kernel_ms_per_step") or step_ms(ctx) or 0.0)
    if not total or fill / total < ctx.thresholds.zero_grad_fill_frac:
        return None
    zg = ctx.value("zero_grad") or {}
    count = (ctx.analysis.get("phase_kernel_count") or {}).get("zero_grad")
    evidence = [f"fill/memset kernels under zero_grad: {ms(fill)} per step ({pct(fill / total)} of kernel time)"]
    if count:
        evidence.append(f"{count:.0f} kernels per step launched by zero_grad")
    if zg:
        evidence.append(f"zero_grad(set_to_none={zg.get('set_to_none')})")
    return {
        "message": "zero_grad fills every gradient with zeros each step instead of dropping it.",
        "evidence": evidence,
        "estimated_gain_ms": fill,
        "fix": fix("set-to-none", changes_numerics=False, where=ctx.where("zero_grad"),
                   code="optimizer.zero_grad(set_to_none=True)"),
    }
