"""Small accessors shared by the rules, so every rule reads the analysis the same way."""

from __future__ import annotations

NON_TC = "gemm_conv"


def step_ms(ctx) -> float:
    return float(ctx.analysis.get("step_time_ms") or 0.0)


def ranks_of(ctx) -> list[tuple[int, dict]]:
    """(rank, analysis) of every trace given: this one first, then the other ranks'. Ranks are
    named as the job did (the trace's distributedInfo), else by the order of the traces."""
    from advisor.metrics import analyze

    analyses = [ctx.analysis] + (ctx.extra_analyses or [analyze(m) for m in ctx.extra_models])
    models = [ctx.model, *ctx.extra_models]
    return [(((getattr(m, "meta", {}) or {}).get("distributed_info") or {}).get("rank", i), a)
            for i, (m, a) in enumerate(zip(models, analyses))]


def dali_feeds(ctx) -> bool:
    """DALI makes the loop's batches on the GPU (config ``dali``): no workers or host images to
    fix in the DataLoader."""
    return bool(ctx.value("dali"))


def phase_ms(ctx, phase: str) -> float:
    return float((ctx.analysis.get("breakdown") or {}).get(phase, 0.0))


def class_frac(ctx, cls: str) -> float:
    return float((ctx.analysis.get("kernel_time_by_class") or {}).get(cls, 0.0))


def class_ms_per_step(ctx, cls: str, phases: tuple[str, ...] | None = None) -> float:
    """Kernel time of one class per step, over all phases or the given ones."""
    per_phase = ctx.analysis.get("phase_class_ms") or {}
    return float(sum(v.get(cls, 0.0) for p, v in per_phase.items() if phases is None or p in phases))



def h2d(ctx) -> dict:
    return (ctx.analysis.get("memcpy") or {}).get("HtoD") or {}



def pct(x: float) -> str:
    return f"{x * 100:.1f}%"


def ms(x: float) -> str:
    return f"{x:.2f} ms"


def mib(n: float) -> str:
    return f"{n / (1 << 20):.1f} MiB"



def fix(intervention: str, *, changes_numerics: bool, code: str, where: str | None = None,
        suggest_only: bool = False, **params) -> dict:
    """A finding's fix: the intervention that trials it, whether it changes the math, the edit;
    ``suggest_only``: shown, not trialled (advisor cannot apply it to this script)."""
    out = {"intervention": intervention, "params": params, "changes_numerics": changes_numerics,
           "code": code, "where": where}
    if suggest_only:
        out["suggest_only"] = True
    return out


def top_kernels_of(ctx, cls: str, n: int = 3) -> list[str]:
    return [k["name"] for k in ctx.analysis.get("top_kernels") or [] if k.get("cls") == cls][:n]


def peak_and_capacity(ctx) -> tuple[int, int]:
    """Peak allocated GPU bytes and the device's capacity (0 when unknown)."""
    m = ctx.analysis.get("memory") or {}
    peak = m.get("peak_allocated_bytes") or 0
    cap = m.get("capacity_bytes") or ctx.environment.get("gpu_memory_bytes") or 0
    return peak, cap


def gib_of(peak: int, cap: int) -> str:
    return f"peak allocated {peak / 2**30:.2f} GiB of {cap / 2**30:.1f} GiB"


def autocast_on(ctx) -> bool:
    """The script already runs its forward under autocast (observed): AMP is not advised. An
    autocast to float32 (nanoGPT's ``dtype = 'float32'``) casts nothing down: not mixed precision."""
    ac = ctx.value("autocast") or {}
    dtype = str(ac.get("dtype") or "").removeprefix("torch.")
    return bool(ac.get("enabled", True) and dtype and dtype != "float32")


def amp_fix(ctx) -> dict:
    """Autocast around forward and loss: bf16 where the GPU has it, else fp16 (+ GradScaler)."""
    bf16_ok = ctx.environment.get("bf16_supported") is not False
    dtype = "torch.bfloat16" if bf16_ok else "torch.float16"
    code = (f'with torch.autocast("cuda", dtype={dtype}):\n    output = model(inputs)\n    loss = criterion(output, target)'
            + ("" if bf16_ok else "\n# fp16 needs a GradScaler: scaler = torch.amp.GradScaler()"))
    return fix("amp", changes_numerics=True, code=code, where=ctx.where("autocast"),
               dtype="bfloat16" if bf16_ok else "float16")


# cuDNN's algorithm search at every step under nn.DataParallel (ADV124): a step's device-wide
# synchronizations beyond this many are the search's, not the script's own (a loss.item() syncs
# the stream, not the device; the search syncs hundreds of times a step: benchmarks/RESULTS.md) ...
SEARCH_SYNCS = 20
# ... and a forward this many times the backward's GPU time is searching: a training step's
# backward does about twice the forward's work, and its forward no more than the backward's
SEARCH_FORWARD_OVER_BACKWARD = 2.0
SEARCH_SYNC_CALLS = ("cudaDeviceSynchronize", "cudaEventSynchronize")


def data_parallel(ctx) -> bool:
    """The model is an nn.DataParallel (one process, a thread per replica)."""
    return (ctx.value("data_parallel") or {}).get("class") == "DataParallel"


def dataparallel_cudnn_search(ctx) -> bool:
    """Each step's forward runs cuDNN's benchmark search again (nn.DataParallel's replica threads
    are new at every call; cuDNN keeps benchmarked plans per thread): ADV124's finding, whose
    synchronizations are then not the script's own (ADV110)."""
    if not data_parallel(ctx) or ctx.value("cudnn.benchmark") is False:
        return False
    syncs = sum(float(s.get("per_step") or 0.0) for s in ctx.analysis.get("syncs") or []
                if s.get("name") == "cudaDeviceSynchronize")
    fwd, bwd = phase_ms(ctx, "forward"), phase_ms(ctx, "backward")
    return syncs >= SEARCH_SYNCS and bwd > 0 and fwd >= SEARCH_FORWARD_OVER_BACKWARD * bwd
