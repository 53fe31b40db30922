"""cuDNN times its convolution algorithms again at every step under nn.DataParallel.

What it does:
    Where the model is an ``nn.DataParallel`` and cudnn.benchmark is not off, looks in each step
    for cuDNN's algorithm search: device-wide synchronizations by the dozen
    (``cudaDeviceSynchronize``), and a forward whose GPU time is several times the backward's.

Why is this bad:
    DataParallel runs each replica's forward in threads it starts anew at every call, and cuDNN
    keeps the plans it benchmarked per thread (sharing them is proposed in pytorch/pytorch pull
    request #191744), so each forward times
    every convolution's candidate algorithms again, synchronizing the device each time. The
    backward runs in autograd's long-lived device threads and keeps its plans. A ResNet-18
    step over four GPUs took over twice as long with benchmark on (benchmarks/RESULTS.md,
    "DataParallel with cudnn.benchmark").

Example:
    model = nn.DataParallel(model)
    torch.backends.cudnn.benchmark = True

Fix:
    torch.backends.cudnn.benchmark = False   # cuDNN's heuristics choose, once
    # or DistributedDataParallel, one process per GPU (ddp): its threads live on

Fix safety:
    Safe: the algorithms cuDNN's heuristics pick compute the same convolutions (results equal
    up to algorithm rounding). A single-GPU run of the same script loses benchmark mode's gain.
"""

from ._common import SEARCH_FORWARD_OVER_BACKWARD, SEARCH_SYNC_CALLS, dataparallel_cudnn_search, fix, ms, phase_ms

CODE = "ADV124"
NAME = "dataparallel-cudnn-retuning"
SEVERITY = "warning"
NEEDS = ("gpu", "config")
FIX = "no-cudnn-benchmark"
HITS = ("dp_benchmark_config",)
NON_HITS = {"dp_no_benchmark_config": "DataParallel with cudnn.benchmark off: no search in its steps",
            "data_parallel_config": "DataParallel with benchmark on, but its steps show no search (one GPU traced)",
            "amp_bf16_channels_last_config": "benchmark on, one GPU, no DataParallel"}


def check(ctx):
    if not dataparallel_cudnn_search(ctx):
        return None
    fwd, bwd = phase_ms(ctx, "forward"), phase_ms(ctx, "backward")
    syncs = {s.get("name"): float(s.get("per_step") or 0.0) for s in ctx.analysis.get("syncs") or []}
    where = ctx.where("cudnn.benchmark")
    return {
        "message": "cuDNN times its convolution algorithms again at every step: nn.DataParallel runs each forward "
                   "in new threads, and cudnn.benchmark's plans are kept per thread"
                   + (f" (benchmark set at {where})" if where else "") + ".",
        "evidence": [", ".join(f"{n}: {syncs[n]:.0f} per step" for n in SEARCH_SYNC_CALLS if syncs.get(n)),
                     f"forward {ms(fwd)} against backward {ms(bwd)} per step",
                     f"model wrapper: nn.DataParallel ({ctx.where('data_parallel') or 'site unknown'})"],
        # the forward's excess over a forward of its usual half of the backward: a floor, the
        # search's synchronizations also hold the host
        "estimated_gain_ms": max(0.0, fwd - bwd / SEARCH_FORWARD_OVER_BACKWARD),
        "fix": fix("no-cudnn-benchmark", changes_numerics=False, where=where,
                   code="torch.backends.cudnn.benchmark = False"),
    }
