"""``one-gpu``: an nn.DataParallel model given one device. A reference (ddp's scaling,
advisor/trials/scaling.py), never a fix."""

from __future__ import annotations

from advisor.fixes.base import Fix


class OneGpu(Fix):
    name = "one-gpu"
    kind = "reference"
    runtime = "one_gpu"
