"""Images copied to the GPU as float32 where uint8 would do.

What it does:
    Looks at the model's observed input (a 4-D float32 image batch) and the host→device
    bytes per step. When the loader produces float32 images normalized on the CPU, four
    times the bytes of the uint8 source cross the bus.

Why is this bad:
    The copy and the CPU-side conversion and normalization both scale with bytes and run in
    the input pipeline, which is often the bottleneck. uint8 is 4x smaller, and normalizing
    on the GPU is nearly free.

Example:
    def __getitem__(self, i):
        return (self.images[i].float() / 255 - mean) / std, self.labels[i]   # float32 on CPU

Fix:
    Return uint8 tensors from the dataset, copy them, and convert on the GPU:
    x = x.to(device, non_blocking=True).float().div_(255).sub_(mean).div_(std)

Fix safety:
    Safe when the normalization is moved unchanged (same formula on the GPU); suggest-only,
    because it edits the dataset code.
"""

from ._common import fix, h2d, mib, ms, step_ms

CODE = "ADV105"
NAME = "float-inputs-over-the-bus"
SEVERITY = "info"
NEEDS = ("gpu", "config")
FIX = "uint8-inputs"
HITS = ("fp32_nchw_config",)
NON_HITS = {"amp_bf16_channels_last_config": "uint8 batches normalized on the GPU",
            "fp32_nchw": "no observed input (trace without its run): not guessed"}


def check(ctx):
    inp = ctx.value("input") or {}
    shape = inp.get("shape") or []
    if inp.get("dtype") != "torch.float32" or len(shape) != 4 or shape[1] not in (1, 3, 4):
        return None
    info = h2d(ctx)
    total = float(info.get("bytes") or 0.0)
    copy_ms = float(info.get("ms") or 0.0)
    if not total or not step_ms(ctx) or copy_ms / step_ms(ctx) < ctx.thresholds.float_input_h2d_frac:
        return None
    return {
        "message": f"Images cross to the GPU as float32 ({mib(total)} per step); uint8 would move a quarter of that.",
        "evidence": [f"model input: {inp.get('dtype')} {shape}", f"HtoD: {mib(total)} per step in {ms(copy_ms)}"],
        "estimated_gain_ms": copy_ms * 0.75,
        "fix": fix("uint8-inputs", changes_numerics=False, where=ctx.where("input"),
                   code="# dataset: return the uint8 image; training loop:\n"
                        "x = x.to(device, non_blocking=True).float().div_(255).sub_(mean).div_(std)"),
    }
