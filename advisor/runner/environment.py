"""child.json's `environment` and `memory`. Nothing here initializes CUDA: GPU details come
from torch only once the script has initialized CUDA, else from NVML / nvidia-smi."""

from __future__ import annotations

import platform
import shutil
import subprocess
import threading

import torch

from advisor.host import usable_cpus


def _s(x) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


class GpuQuery:
    """Driver, GPU name/count/memory via pynvml or nvidia-smi, in a background thread."""

    def __init__(self) -> None:
        self.info: dict = {}
        self._thread = threading.Thread(target=self._run, name="advisor-gpu-query", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        info: dict = {}
        try:
            import pynvml  # type: ignore

            pynvml.nvmlInit()
            h = pynvml.nvmlDeviceGetHandleByIndex(0)
            info = {"driver": _s(pynvml.nvmlSystemGetDriverVersion()),
                    "gpu_count": int(pynvml.nvmlDeviceGetCount()),
                    "gpu_name": _s(pynvml.nvmlDeviceGetName(h)),
                    "gpu_memory_bytes": int(pynvml.nvmlDeviceGetMemoryInfo(h).total)}
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
            info["compute_capability"] = f"{major}.{minor}"
        except Exception:
            smi = shutil.which("nvidia-smi")
            if smi:
                try:
                    out = subprocess.run(
                        [smi, "--query-gpu=name,memory.total,driver_version",
                         "--format=csv,noheader,nounits"],
                        capture_output=True, text=True, timeout=15, stdin=subprocess.DEVNULL,
                    ).stdout.strip().splitlines()
                    if out:
                        name, mem, drv = [x.strip() for x in out[0].split(",")[:3]]
                        info = {"driver": drv, "gpu_count": len(out), "gpu_name": name,
                                "gpu_memory_bytes": int(float(mem) * 1024 * 1024)}
                except Exception:
                    pass
        self.info = info

    def result(self, wait: float = 0.5) -> dict:
        self._thread.join(timeout=wait)
        return dict(self.info)


def environment(gpu: GpuQuery | None) -> dict:
    env = {"python": platform.python_version(), "torch": torch.__version__,
           "cuda": torch.version.cuda, "cudnn": None, "driver": None, "gpu_name": None,
           "gpu_count": 0, "gpu_memory_bytes": None, "cpu_count": usable_cpus(),
           "platform": platform.platform()}
    try:
        # cudnn.version() initializes CUDA (it checks device capabilities): only once the
        # script has; before that, ask the library directly.
        if torch.cuda.is_initialized():
            env["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        elif getattr(torch._C, "_has_cudnn", False):
            env["cudnn"] = int(torch._C._cudnn.getVersionInt())
    except Exception:
        pass
    smi = gpu.result() if gpu is not None else {}
    env.update(smi)
    try:
        if torch.cuda.is_initialized():
            dev = torch.cuda.current_device()
            props = torch.cuda.get_device_properties(dev)
            env["gpu_name"] = props.name
            env["gpu_memory_bytes"] = int(props.total_memory)
            env["compute_capability"] = f"{props.major}.{props.minor}"
            env["gpu_count"] = torch.cuda.device_count()
        elif not smi and torch.cuda.is_available():
            env["gpu_count"] = torch.cuda.device_count()
    except Exception:
        pass
    return env


def memory() -> dict:
    mem = {"max_allocated_bytes": None, "max_reserved_bytes": None, "capacity_bytes": None}
    try:
        if torch.cuda.is_initialized():
            dev = torch.cuda.current_device()
            mem["max_allocated_bytes"] = int(torch.cuda.max_memory_allocated(dev))
            mem["max_reserved_bytes"] = int(torch.cuda.max_memory_reserved(dev))
            mem["capacity_bytes"] = int(torch.cuda.get_device_properties(dev).total_memory)
    except Exception:
        pass
    return mem


def reserved_so_far() -> dict:
    """{reserved_bytes, capacity_bytes}: the most this process reserved on its device so far
    (a warm-up's compile and cudnn.benchmark search included); {} before CUDA is up."""
    mem = memory()
    if not mem["max_reserved_bytes"]:
        return {}
    return {"reserved_bytes": mem["max_reserved_bytes"], "capacity_bytes": mem["capacity_bytes"]}
