"""Convolutions run with cudnn.benchmark off.

What it does:
    Checks the observed ``torch.backends.cudnn.benchmark`` (and ``deterministic``) when the
    trace shows convolution kernels; not where the model is an nn.DataParallel over several
    GPUs, whose benchmark mode searches again at every step (ADV124).

Why is this bad:
    Without benchmark mode cuDNN picks a convolution algorithm by heuristics. With it, cuDNN
    times the candidates once per input shape and keeps the fastest, which for fixed-shape
    training is often markedly faster. ``deterministic=True`` further restricts the choice.

Example:
    torch.backends.cudnn.benchmark = False

Fix:
    torch.backends.cudnn.benchmark = True    # once, before the training loop

Fix safety:
    Safe for fixed input shapes (results equal up to algorithm rounding). With shapes that
    change every step, benchmarking repeats for each new shape and can slow training.
"""

from ._common import class_ms_per_step, data_parallel, fix, ms

CODE = "ADV108"
NAME = "cudnn-benchmark-off"
SEVERITY = "info"
NEEDS = ("gpu", "config")
FIX = "cudnn-benchmark"
HITS = ("fp32_nchw_config",)
NON_HITS = {"amp_bf16_channels_last_config": "benchmark=True observed",
            "fp32_nchw": "no observed config: the flag is unknown",
            "dp_no_benchmark_config": "nn.DataParallel over 4 GPUs: benchmark mode would search at every step (ADV124)"}


def _has_convs(ctx) -> bool:
    return any("conv" in k["name"].lower() or "nchw" in k["name"].lower() or "implicit" in k["name"].lower()
               for k in ctx.analysis.get("top_kernels") or [])


def check(ctx):
    bench = ctx.value("cudnn.benchmark")
    det = ctx.value("cudnn.deterministic")
    if bench is True or bench is None or not _has_convs(ctx):
        return None
    if data_parallel(ctx) and int(ctx.environment.get("gpu_count") or 0) > 1:
        return None   # its replicas' threads are new at every call: cuDNN would search every step (ADV124)
    conv_ms = class_ms_per_step(ctx, "tc_gemm_conv") + class_ms_per_step(ctx, "gemm_conv")
    where = ctx.where("cudnn.benchmark")
    return {
        "message": "cudnn.benchmark is off" + (f" (set at {where})" if where else "")
                   + ": cuDNN does not time its convolution algorithms.",
        "evidence": [f"cudnn.benchmark={bench}, cudnn.deterministic={det}",
                     f"GEMM/conv kernel time: {ms(conv_ms)} per step"],
        "estimated_gain_ms": None,  # only a trial can tell; the bound would be all conv time
        "fix": fix("cudnn-benchmark", changes_numerics=False, where=where,
                   code="torch.backends.cudnn.benchmark = True"),
    }
