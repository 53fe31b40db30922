"""fp32 matmuls and convolutions running off the Tensor Cores.

What it does:
    Measures the share of GPU kernel time spent in matrix multiplies and convolutions that
    do not use Tensor Cores (fp32 operands, e.g. ``sm80_xmma_fprop_..._f32f32_...``,
    ``implicit_convolve_sgemm``, ``ampere_sgemm_*``), and checks that autocast is not already on.

Why is this bad:
    On Ampere and Hopper GPUs the Tensor Cores deliver 8-16x the fp32 FLOP rate. A model
    that trains in plain fp32 (with TF32 disabled, the PyTorch default for matmuls) leaves
    most of the chip idle: fp32 ResNet training spends most of its kernel time in such
    kernels.

Example:
    model = resnet50().cuda()
    for x, y in loader:
        loss = criterion(model(x.cuda()), y.cuda())   # fp32 everywhere
        loss.backward()

Fix:
    Run forward and loss under autocast in bf16 (fp16 with a GradScaler on GPUs without bf16):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = criterion(model(x), y)
    Or, keeping fp32 storage, allow TF32: torch.backends.cuda.matmul.allow_tf32 = True and
    torch.backends.cudnn.allow_tf32 = True (torch.set_float32_matmul_precision("high")).

Fix safety:
    Unsafe: changes numerics. bf16/fp16 autocast and TF32 round matmul inputs; most models
    train to the same accuracy, but losses differ step by step. Never proposed when autocast
    is already enabled (DLProf's known false positive).
"""

from ._common import NON_TC, amp_fix, autocast_on, class_frac, class_ms_per_step, ms, pct, top_kernels_of

CODE = "ADV101"
NAME = "fp32-off-tensor-cores"
SEVERITY = "warning"
NEEDS = ("gpu",)
FIX = "amp"
# tf32_nchw is a hit: with TF32 allowed, cuDNN still runs fp32 SIMT kernels for some
# convolutions (wgrad_alg1_engine<float>, *_ffma_* GEMMs), over the threshold in that trace.
HITS = ("fp32_nchw", "tf32_nchw")
NON_HITS = {"amp_bf16_nchw": "autocast bf16: 1.8% of kernel time left off the Tensor Cores",
            "fp32_nchw_autocast_config": "autocast observed in the config: never advise AMP twice"}


def check(ctx):
    frac = class_frac(ctx, NON_TC)
    if frac < ctx.thresholds.non_tc_gemm_frac:
        return None
    if autocast_on(ctx):
        return None  # AMP already on: remaining fp32 GEMMs are deliberate (losses, heads)
    autocast = ctx.value("autocast") or {}
    gain = class_ms_per_step(ctx, NON_TC)
    names = top_kernels_of(ctx, NON_TC)
    return {
        "message": f"{pct(frac)} of GPU kernel time is matmul/conv off the Tensor Cores (fp32 operands).",
        "evidence": [f"non-Tensor-Core GEMM/conv: {pct(frac)} of kernel time, {ms(gain)} per step",
                     f"Tensor Core GEMM/conv: {pct(class_frac(ctx, 'tc_gemm_conv'))}",
                     *[f"kernel: {n}" for n in names],
                     "autocast: not observed" if not autocast else f"autocast: {autocast}"],
        "estimated_gain_ms": gain,
        "fix": amp_fix(ctx),
    }
