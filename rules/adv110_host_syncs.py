"""Host-device synchronizations inside the training step.

What it does:
    Counts calls that make the CPU wait for the GPU within each step:
    ``cudaDeviceSynchronize``/``cudaStreamSynchronize``, blocking device→host copies, and the
    ATen ops behind ``.item()``, ``.cpu()``, ``.tolist()``, printing a CUDA tensor. Then asks
    whether the host actually waits in them: the runner times ``.item()`` on device tensors in
    the timed window (else the profiled trace's blocked time is used). Where it waits, the
    gain estimate is the timed step's excess over the GPU's busy time; where it does not (the
    host is busy the whole step, loader- or launch-bound), the finding is info and the fix is
    not trialled yet (the rules run again on every kept stack).

Why is this bad:
    A sync drains the GPU's queue: the CPU stops launching until all queued work finishes,
    and the GPU then idles while the CPU launches the next kernels. One per step for logging
    is cheap; several per step (or inside loops) serialize CPU and GPU.

Example:
    running_loss += loss.item()         # every step
    if torch.isnan(loss).any(): ...     # implicit sync on a Python bool

Fix:
    Accumulate on the device and read back rarely:
    running_loss += loss.detach()       # tensor on the GPU
    if step % 100 == 0: print(running_loss.item() / 100)

Fix safety:
    Numerics are unchanged. When the syncs come from ``.item()`` calls in the script's own
    code (observed call sites on device tensors), the ``defer-syncs`` trial makes those calls
    return a number read when first used (bit-identical values; code that needs a real
    ``float`` object, such as ``json.dumps``, fails and the trial is rejected). Other syncs
    (``torch.cuda.synchronize()``, ``.cpu()``, a Python ``bool`` of a tensor) are
    suggest-only: removing them changes when values are read, which only the author can judge.
"""

from ._common import SEARCH_SYNC_CALLS, dataparallel_cudnn_search, fix, ms, phase_ms, step_ms

CODE = "ADV110"
NAME = "host-syncs-in-step"
SEVERITY = "warning"
NEEDS = ("gpu", "steps")
FIX = "defer-syncs"
HITS = ("sync_item", "sync_item_observed_config", "gpu_run_h100_compiled_item_syncs",
        "gpu_run_h100_compiled_item_syncs_b", "gpu_run_h100_compiled_item_syncs_slow_host")
NON_HITS = {"amp_bf16_channels_last": "no .item() or synchronize inside the step",
            "fp32_nchw": "its 2 syncs per step are pageable H2D copies (ADV104's finding)",
            "dp_benchmark_config": "its 812 syncs per step are cuDNN's search under DataParallel (ADV124's finding)"}
# A sync per step costs most once the step is short and launched as CUDA graphs: this rule
# often first fires on compile's trace, and that trial, started from scratch, pays its whole
# start-up (docs/trials.md). advisor.guesses starts it ahead while compile's runs.
AFTER = ("torch-compile",)


# Syncs inside a host-to-device copy op are the pageable-copy staging that ADV104 reports
# (a pageable cudaMemcpyAsync is followed by cudaStreamSynchronize); counting them here too
# would report one cost twice and propose a fix (deferring syncs) that cannot remove them.
COPY_OPS = ("aten::to", "aten::_to_copy", "aten::copy_", "aten::contiguous")


ITEM_OPS = ("aten::item", "aten::_local_scalar_dense")   # what a .item() shows as in the trace
CODE_HINT = "running_loss += loss.detach()   # instead of loss.item() every step"
# Below this share of the step the syncs' cost is not trialled now (the ladder's 3% floor).
MIN_SHARE = 0.03
# The host waits in the syncs when it is blocked in them for this share of the profiled step.
BLOCKED_SHARE = 0.01


def device_item_sites(ctx) -> list[str]:
    """Call sites in the script's code where .item() read a device tensor (observed)."""
    sites = (ctx.value("item_calls") or {}).get("sites") or {}
    return [where for where, s in sites.items() if s.get("device")]


def check(ctx):
    # cuDNN's benchmark search under nn.DataParallel synchronizes the device by the hundred
    # each step (ADV124's finding): those are not the script's to defer
    searching = SEARCH_SYNC_CALLS if dataparallel_cudnn_search(ctx) else ()
    syncs = [s for s in ctx.analysis.get("syncs") or []
             if s.get("per_step") and not str(s.get("name", "")).startswith(COPY_OPS) and s.get("name") not in searching]
    per_step = sum(float(s["per_step"]) for s in syncs)
    if per_step <= ctx.thresholds.syncs_per_step:
        return None
    sites = device_item_sites(ctx)
    items = any(str(s.get("name", "")) in ITEM_OPS for s in syncs)
    idle = phase_ms(ctx, "gpu_idle")
    blocked = ctx.analysis.get("sync_blocked_ms_per_step")
    measured = ctx.analysis.get("measured") or {}
    # The host's waits in .item() during the timed window (the runner times them there,
    # unprofiled): the profiler slows the host, and a compiled step can read as barely
    # blocked in the profiled trace (docs/measurement.md).
    unprofiled = measured.get("item_wait_ms_per_step")
    evidence = [f"{s['name']}: {s['per_step']:.1f} per step" for s in syncs][:6] \
        + ([f".item() on a device tensor at {', '.join(sites[:4])}"] if sites else [])
    waits = True
    if blocked is None and unprofiled is None:
        # No runtime events: the GPU idle that is not the loader's (ADV103/ADV118) bounds it.
        loader = float(measured.get("data_wait_ms_per_step") or phase_ms(ctx, "data_wait"))
        gain = max(0.0, idle - loader)
        evidence.append(f"GPU idle per step: {ms(idle)}" + (f" ({ms(loader)} of data waits per step are the loader's)" if loader else ""))
        now = True
    else:
        # Where the host never waits in the syncs (a loader-bound or launch-bound eager step,
        # blocked in them for a sliver of the step) it bounds the step and the syncs cost
        # nothing yet. Where it does (compiled, CUDA graphs), deferring them lets it queue the
        # next step while the GPU runs: the step tends to the GPU's busy time, so the gain is
        # the timed step's excess over it (an estimate that matched what deferring gave:
        # docs/measurement.md).
        step = step_ms(ctx)
        timed = float(measured.get("step_ms") or step)
        wait = float(unprofiled if unprofiled is not None else blocked)
        waits = wait >= BLOCKED_SHARE * (timed if unprofiled is not None else step)
        gain = min(idle, max(0.0, timed - (step - idle))) if waits else wait
        if unprofiled is not None:
            # The host gets back at most the time it waits: on an eager step that the GPU
            # bounds, its waits are all deferring can give.
            gain = min(gain, unprofiled)
        evidence.append((f"host waiting in .item() in the timed window: {ms(unprofiled)} per step; " if unprofiled is not None else "")
                        + (f"host blocked in them: {ms(blocked)} per profiled step; " if blocked is not None else "")
                        + f"GPU idle per step: {ms(idle)}; GPU busy {ms(step - idle)} of a {ms(timed)} timed step")
        now = waits and gain >= MIN_SHARE * timed
    message = f"{per_step:.1f} host-device synchronizations per step stall the launch queue."
    if not now:
        message = (f"{per_step:.1f} host-device synchronizations per step, but the host is busy for the whole step "
                   f"(it waits {ms(gain)} in them): deferring them pays once the host gets ahead of the GPU."
                   if not waits else
                   f"{per_step:.1f} host-device synchronizations per step; the GPU is busy for nearly all of the "
                   f"timed step, so deferring them would gain {ms(gain)} at most.")
    return {
        "severity": SEVERITY if now else "info",
        "message": message,
        "evidence": evidence,
        "estimated_gain_ms": gain,
        # the most deferring can give: the ladder does not trial it while that is under the
        # gain it could confirm (rungs.pick), and asks again on the next kept stack
        "gain_is_upper_bound": True,
        # trialled only when the syncs are .item() calls the script makes itself, and when
        # they cost something now (the rules run again on every kept stack's trace)
        "fix": fix("defer-syncs", changes_numerics=False, suggest_only=not (sites and items and now),
                   code=CODE_HINT, where=sites[0] if sites else None),
    }
