"""NVIDIA DALI input pipelines: the dali fix's plan and code.

- ``datasets``: which image files a map-style dataset reads, with which labels and transform;
- ``transforms``: torchvision transforms → DALI operators, as pipeline lines;
- ``source``: the ``_DaliLoader`` class the fix runs and writes into the script;
- ``plan``: whether DALI can stand in for a DataLoader, and the evidence (a sample's cost).

Nothing here imports DALI; ``install_hint()`` says how to get it.
"""

from __future__ import annotations

import importlib.util


def installed() -> bool:
    try:
        return importlib.util.find_spec("nvidia.dali") is not None
    except (ImportError, ValueError):
        return False


def install_hint(cuda_version: str | None = None) -> str:
    """The install command for the DALI build that matches torch's CUDA major version."""
    if cuda_version is None:
        try:
            import torch

            cuda_version = torch.version.cuda
        except Exception:  # noqa: BLE001
            cuda_version = None
    if cuda_version and cuda_version.split(".")[0] == "13":
        return "pip install 'advisor[dali-cuda13]' (nvidia-dali-cuda130, for torch's CUDA 13 build)"
    return "pip install 'advisor[dali]' (nvidia-dali-cuda120; advisor[dali-cuda13] for a CUDA 13 build of torch)"
