"""The GPU idles between many short kernels: the step is launch-bound.

What it does:
    Measures GPU busy time over the step, the number of kernels per step and how many of
    them are shorter than the launch cost, and compares GPU kernel time with the step time.

Why is this bad:
    When the CPU cannot issue kernels as fast as the GPU finishes them, the GPU waits for
    launches: the step time is set by Python and the CUDA launch path, not by the math.
    ``nsys analyze`` flags GPU utilization under 50%. A ResNet-50 at 32x32 with batch 256
    keeps the GPU busy for a small part of its step.

Example:
    model = resnet18()       # small images, small batch: thousands of tiny kernels

Fix:
    Give each launch more work or launch less: a larger batch; ``model.compile()``
    (fuses elementwise kernels); CUDA graphs (``model.compile(mode="reduce-overhead")``).

Fix safety:
    torch.compile is safe (same math, fused; first steps pay compile time). A larger batch
    changes training dynamics: scale the learning rate with it.
"""

from ._common import fix, ms, pct, phase_ms, step_ms

CODE = "ADV109"
NAME = "launch-bound-gpu"
SEVERITY = "warning"
NEEDS = ("gpu", "steps")
FIX = "torch-compile"
HITS = ("amp_bf16_channels_last",)
NON_HITS = {"gpu_run_h100_cifar_tuned_graphs": "CUDA graphs, data on the GPU: kernels fill 86% of the unprofiled H100 step",
            "gpu_resident_resnet50_cl": "224x224 ResNet-50, batch 128, data on the GPU: long kernels keep it busy"}
# Faster kernels leave the launches exposed: a step busy enough in fp32 may fire this rule
# only on AMP's trace, and compile's trial would then start from scratch (docs/trials.md).
# advisor.guesses starts it ahead while AMP's trial runs.
AFTER = ("amp",)


def check(ctx):
    busy = ctx.analysis.get("gpu_busy_pct")
    if busy is None:
        return None
    # The profiler slows the CPU side of a step (docs/measurement.md), so a
    # launch-bound step looks idler profiled than it is: judge GPU kernel time against the
    # unprofiled step when the run measured one.
    # The loop's measured waits for data are the loader's cost (ADV103/ADV118 report them),
    # not launch overhead: they leave the step the GPU is judged against.
    measured = ctx.analysis.get("measured") or {}
    kernel_ms = float(ctx.analysis.get("gpu_kernel_ms_per_step") or 0.0)
    waits = float(measured.get("data_wait_ms_per_step") or 0.0)
    unprofiled = float(measured.get("step_ms") or 0.0) - waits
    profiled_busy = busy
    if unprofiled > 0 and kernel_ms > 0:
        busy = min(100.0, 100.0 * kernel_ms / unprofiled)
    t = ctx.thresholds
    if busy >= t.gpu_busy_pct_info:
        return None
    idle = phase_ms(ctx, "gpu_idle")
    total = step_ms(ctx)
    short = float(ctx.analysis.get("short_kernel_frac") or 0.0)
    kernels = ctx.analysis.get("kernels_per_step") or 0
    mean_us = ctx.analysis.get("mean_kernel_us") or 0.0
    wait = phase_ms(ctx, "data_wait")
    if total and wait / total >= t.data_wait_frac and idle < wait:
        return None  # the idle time is the data loader's: ADV103 explains it
    severity = "warning" if busy < t.gpu_busy_pct_warn else "info"
    return {
        "severity": severity,
        "message": f"The GPU is busy only {busy:.0f}% of the step; {kernels:.0f} kernels per step average {mean_us:.0f} us.",
        "evidence": [f"GPU busy: {busy:.1f}% ({ms(kernel_ms)} of kernels per step"
                     + (f" against an unprofiled step of {ms(unprofiled)}"
                        + (f" after {ms(waits)} of data waits" if waits else "")
                        + f"; {profiled_busy:.1f}% of the profiled {ms(total)})"
                        if unprofiled > 0 and kernel_ms > 0 else f" in a profiled step of {ms(total)})"),
                     f"GPU idle outside data loading: {ms(idle)} per step",
                     f"{kernels:.0f} kernels per step, mean {mean_us:.1f} us, {pct(short)} shorter than {t.short_kernel_us:.0f} us"],
        # the idle time of the unprofiled step when it was measured, not the profiler-inflated one
        "estimated_gain_ms": max(0.0, unprofiled - kernel_ms) if unprofiled > 0 and kernel_ms > 0 else idle,
        "fix": fix("torch-compile", changes_numerics=False, code="model.compile()",
                   where=ctx.where("parameters")),
        "alternatives": ["batch-size", "cuda-graphs"],
    }
