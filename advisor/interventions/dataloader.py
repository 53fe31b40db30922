"""DataLoader settings: worker processes, pinned memory, persistent workers, prefetching.

Also makes host→device copies from pinned memory asynchronous (``non_blocking=True``),
which is what pinning is for.
"""

from __future__ import annotations

import torch

from advisor.host import usable_cpus
from advisor.runtime.patching import wrap

NAME = "dataloader-workers"


def describe(params) -> str:
    parts = []
    if params.get("num_workers") is not None:
        parts.append(f"num_workers={params['num_workers']}")
    if params.get("pin_memory"):
        parts.append("pin_memory=True + non_blocking copies")
    if params.get("num_workers"):
        if not params.get("pin_memory"):
            parts.append("persistent_workers=True")
        parts.append(f"prefetch_factor={params.get('prefetch_factor', 4)}")
    return "DataLoader " + ", ".join(parts)


def not_applicable(config, environment, params):
    dl = (config.get("dataloader") or {}).get("value")
    if dl is None:
        return "the script uses no torch DataLoader"
    if params.get("num_workers") is not None and dl.get("num_workers", 0) >= params["num_workers"] and not params.get("pin_memory"):
        return f"the DataLoader already has num_workers={dl.get('num_workers')}"
    if params.get("pin_memory") and params.get("num_workers") is None and dl.get("pin_memory"):
        return "the DataLoader already pins memory"
    return None


def apply(params) -> None:
    workers = params.get("num_workers")
    pin = params.get("pin_memory")

    def make(orig):
        def __init__(self, *args, **kwargs):
            pins = bool(pin and torch.cuda.is_available() or kwargs.get("pin_memory"))
            if workers is not None:
                kwargs["num_workers"] = int(workers)
                if workers > 0:
                    # persistent workers beside a pinning thread hang the script's exit
                    # (benchmarks/RESULTS.md): only a loader that does not pin keeps its workers
                    if not pins:
                        kwargs["persistent_workers"] = True
                    kwargs["prefetch_factor"] = int(params.get("prefetch_factor", 4))
                else:
                    kwargs.pop("persistent_workers", None)
                    kwargs.pop("prefetch_factor", None)
            if pin and torch.cuda.is_available():
                kwargs["pin_memory"] = True
            return orig(self, *args, **kwargs)
        return __init__

    wrap(torch.utils.data.DataLoader, "__init__", make)
    if pin and torch.cuda.is_available():
        _async_copies()


def _to_accelerator(args, kwargs) -> bool:
    d = kwargs.get("device", args[0] if args else None)
    if isinstance(d, torch.Tensor):
        d = d.device
    if isinstance(d, int) and not isinstance(d, bool):
        return True
    return isinstance(d, (str, torch.device)) and str(d).split(":")[0] == "cuda"


def _pinned_in_main_process(t: torch.Tensor) -> bool:
    # is_pinned() asks the CUDA driver: never call it in a forked DataLoader worker (CUDA
    # cannot be initialized there), and only for CPU tensors headed for the GPU.
    return t.device.type == "cpu" and torch.utils.data.get_worker_info() is None and t.is_pinned()


def _async_copies() -> None:
    def make(orig):
        def to(self, *args, **kwargs):
            if "non_blocking" not in kwargs and _to_accelerator(args, kwargs) and _pinned_in_main_process(self):
                kwargs["non_blocking"] = True
            return orig(self, *args, **kwargs)
        return to

    wrap(torch.Tensor, "to", make)

    def make_cuda(orig):
        def cuda(self, *args, **kwargs):
            if "non_blocking" not in kwargs and _pinned_in_main_process(self):
                kwargs["non_blocking"] = True
            return orig(self, *args, **kwargs)
        return cuda

    wrap(torch.Tensor, "cuda", make_cuda)


def default_workers() -> int:
    return max(2, min(8, usable_cpus()))
