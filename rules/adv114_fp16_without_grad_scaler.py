"""fp16 autocast without a GradScaler.

What it does:
    Finds autocast with ``dtype=torch.float16`` and no ``GradScaler`` in the script (observed
    config), or fp16 Tensor Core kernels in a trace with no scaler activity.

Why is this bad:
    fp16 has a narrow exponent range: small gradients underflow to zero and training
    silently stalls or diverges. PyTorch's AMP recipe pairs fp16 autocast with GradScaler,
    which scales the loss before backward and unscales before the step.

Example:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x).loss
    loss.backward(); optimizer.step()

Fix:
    scaler = torch.amp.GradScaler("cuda")
    scaler.scale(loss).backward(); scaler.step(optimizer); scaler.update()
    Or use bf16 (same range as fp32) where the GPU supports it.

Fix safety:
    Safe: the scaler only rescales; skipped steps on inf/NaN are the intended behaviour.
"""

from ._common import fix

CODE = "ADV114"
NAME = "fp16-without-grad-scaler"
SEVERITY = "error"
NEEDS = ("config",)
FIX = "grad-scaler"
HITS = ("amp_fp16_noscaler_config",)
NON_HITS = {"amp_fp16_scaler_config": "GradScaler observed", "amp_bf16_channels_last_config": "bf16 needs no scaler"}


def check(ctx):
    ac = ctx.value("autocast") or {}
    if not ac.get("enabled", True) or "float16" not in str(ac.get("dtype")) or "bfloat16" in str(ac.get("dtype")):
        return None
    scaler = ctx.value("grad_scaler") or {}
    if scaler and scaler.get("enabled", True):
        return None
    return {
        "message": "fp16 autocast runs without a GradScaler: small gradients underflow to zero.",
        "evidence": [f"autocast dtype {ac.get('dtype')} at {ctx.where('autocast') or '?'}", "no GradScaler observed"],
        "estimated_gain_ms": None,
        "fix": fix("grad-scaler", changes_numerics=True, where=ctx.where("autocast"),
                   code='scaler = torch.amp.GradScaler("cuda")\nscaler.scale(loss).backward()\nscaler.step(optimizer)\nscaler.update()'),
    }
