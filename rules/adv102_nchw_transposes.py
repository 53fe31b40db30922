"""NCHW↔NHWC layout transposes around convolutions.

What it does:
    Measures GPU kernel time in cuDNN's layout conversion kernels (``nchwToNhwcKernel``,
    ``nhwcToNchwKernel``) that run before and after Tensor Core convolutions when the
    model and its inputs are in the default NCHW (contiguous) memory format.

Why is this bad:
    Tensor Core convolutions want NHWC. With NCHW tensors cuDNN transposes every
    activation and gradient on the way in and out: on a ResNet-50 a large share of all kernel
    time, and none with channels_last.

Example:
    model = resnet50().cuda()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(images.cuda())          # images and weights are NCHW

Fix:
    Convert the model and the 4-D inputs to channels_last once:
    model = model.to(memory_format=torch.channels_last)
    images = images.to(device, memory_format=torch.channels_last)

Fix safety:
    Safe: the same math in another memory layout; results match to rounding.
"""

from ._common import class_frac, class_ms_per_step, fix, ms, pct, top_kernels_of

CODE = "ADV102"
NAME = "nchw-transposes"
SEVERITY = "warning"
NEEDS = ("gpu",)
FIX = "channels-last"
HITS = ("amp_bf16_nchw", "resnet50_bf16_nchw")
NON_HITS = {"amp_bf16_channels_last": "channels_last model and inputs: no transposes"}


def check(ctx):
    frac = class_frac(ctx, "layout_transpose")
    if frac < ctx.thresholds.transpose_frac:
        return None
    gain = class_ms_per_step(ctx, "layout_transpose")
    inp = ctx.value("input") or {}
    return {
        "message": f"{pct(frac)} of GPU kernel time converts between NCHW and NHWC around convolutions.",
        "evidence": [f"layout transposes: {pct(frac)} of kernel time, {ms(gain)} per step",
                     *[f"kernel: {n}" for n in top_kernels_of(ctx, "layout_transpose", 2)],
                     f"input memory format: {inp.get('memory_format', 'unknown')}"],
        "estimated_gain_ms": gain,
        "fix": fix("channels-last", changes_numerics=False, where=ctx.where("input"),
                   code="model = model.to(memory_format=torch.channels_last)\n"
                        "inputs = inputs.to(device, memory_format=torch.channels_last)"),
    }
