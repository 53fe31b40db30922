"""fp32 training whose matmuls and convolutions run in TF32 where bf16 autocast would do.

What it does:
    Measures the share of GPU kernel time in matrix multiplies and convolutions whose math is
    TF32 (``sm90_xmma_..._f32f32_tf32f32_f32_...``, CUTLASS ``s1688`` kernels): fp32 tensors
    on the Tensor Cores, as cuDNN runs convolutions by default. Checks that autocast is off, or
    on in float32 (which casts nothing down).

Why is this bad:
    TF32 is the slow half of the Tensor Cores: bf16 and fp16 run at twice its rate on Ampere
    and Hopper, and 16-bit activations halve the bytes every elementwise and normalization
    kernel moves. ADV101 does not see this model (its convolutions are on the Tensor Cores),
    yet an fp32 ResNet spends a large share of its kernel time in TF32 convolutions.

Example:
    model = resnet18().cuda()        # fp32; cuDNN uses TF32 for the convolutions
    loss = criterion(model(x), y)

Fix:
    Run forward and loss under autocast in bf16 (fp16 with a GradScaler on GPUs without bf16):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = criterion(model(x), y)

Fix safety:
    Unsafe: changes numerics. bf16 rounds activations and matmul inputs to an 8-bit mantissa;
    most models train to the same accuracy, but losses differ step by step. Never proposed
    when autocast is already on.
"""

from ._common import amp_fix, autocast_on, class_frac, ms, pct

CODE = "ADV117"
NAME = "tf32-without-autocast"
SEVERITY = "warning"
NEEDS = ("gpu",)
FIX = "amp"
HITS = ("tf32_nchw", "gpu_run_h100_cifar_slow", "tf32_autocast_float32_config")
NON_HITS = {"fp32_nchw": "TF32 off: the fp32 convolutions run off the Tensor Cores (ADV101's case)",
            "amp_bf16_nchw": "autocast bf16: 0.2% of kernel time left in TF32",
            "fp32_nchw_autocast_config": "autocast observed in the config: never advise AMP twice"}


def check(ctx):
    frac = float(ctx.analysis.get("tf32_gemm_conv_frac") or 0.0)
    if frac < ctx.thresholds.tf32_gemm_frac:
        return None
    if autocast_on(ctx):
        return None
    autocast = ctx.value("autocast") or {}
    per_step = float(ctx.analysis.get("tf32_gemm_conv_ms_per_step") or 0.0)
    names = [k["name"] for k in ctx.analysis.get("top_kernels") or []
             if k.get("cls") == "tc_gemm_conv" and "tf32" in k["name"].lower()][:3]
    return {
        "message": f"{pct(frac)} of GPU kernel time is matmul/conv in TF32; bf16 autocast runs them at twice the rate.",
        "evidence": [f"TF32 GEMM/conv: {pct(frac)} of kernel time, {ms(per_step)} per step",
                     f"all Tensor Core GEMM/conv: {pct(class_frac(ctx, 'tc_gemm_conv'))}",
                     *[f"kernel: {n}" for n in names],
                     "autocast: not observed" if not autocast else f"autocast: {autocast}"],
        "estimated_gain_ms": per_step,
        "fix": amp_fix(ctx),
    }
