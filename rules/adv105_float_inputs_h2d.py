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

from ._common import dali_feeds, fix, h2d, mib, ms, pct, phase_ms, step_ms

CODE = "ADV105"
NAME = "float-inputs-over-the-bus"
SEVERITY = "info"
NEEDS = ("gpu", "config")
FIX = "uint8-inputs"
HITS = ("fp32_nchw_config", "gpu_run_h100_cifar_slow")
NON_HITS = {"amp_bf16_channels_last_config": "uint8 batches normalized on the GPU",
            "fp32_nchw": "no observed input (trace without its run): not guessed",
            "imagefolder_dali_h200": "DALI decodes on the GPU: what it copies is the encoded JPEGs"}


def check(ctx):
    if dali_feeds(ctx):
        return None
    inp = ctx.value("input") or {}
    shape = inp.get("shape") or []
    # the runner records "float32"; configs written by hand (and older runs) "torch.float32"
    if str(inp.get("dtype")).removeprefix("torch.") != "float32" or len(shape) != 4 or shape[1] not in (1, 3, 4):
        return None
    total = step_ms(ctx)
    info = h2d(ctx)
    copy_ms = float(info.get("ms") or 0.0)
    wait = phase_ms(ctx, "data_wait")
    t = ctx.thresholds
    # Float images cost twice: 4x the bytes on the bus, and the CPU-side conversion and
    # normalization inside the loader. Either one being a visible share of the step counts.
    copy_heavy = total and copy_ms / total >= t.float_input_h2d_frac
    loader_heavy = total and wait / total >= t.data_wait_frac
    if not (copy_heavy or loader_heavy):
        return None
    return {
        "message": f"Images reach the GPU as float32 ({mib(float(info.get('bytes') or 0.0))} per step); "
                   "copying uint8 and normalizing on the GPU moves a quarter of the bytes and takes the "
                   "conversion out of the loader.",
        "evidence": [f"model input: {inp.get('dtype')} {shape}",
                     f"HtoD: {mib(float(info.get('bytes') or 0.0))} per step in {ms(copy_ms)}",
                     f"data wait: {ms(wait)} per step ({pct(wait / total) if total else '?'})"],
        "estimated_gain_ms": copy_ms * 0.75,  # the bytes saved; the loader share only a trial can tell
        "fix": fix("uint8-inputs", changes_numerics=False, where=ctx.where("input"),
                   code="# dataset: return the uint8 image; training loop:\n"
                        "x = x.to(device, non_blocking=True).float().div_(255).sub_(mean).div_(std)"),
    }
