"""Whether torch is capturing a graph of what runs now: Dynamo compiling, or ``torch.jit.trace``
(TensorBoard's ``add_graph`` traces the model once). advisor's hooks stay out of both: a hook's
ranges and reads become part of a traced graph, and torch.jit.trace's check then finds the graph
differs from a second trace ("Tracing failed sanity checks!", weiaicunzai/pytorch-cifar100)."""

from __future__ import annotations

import torch

_compiling = torch.compiler.is_compiling
_tracing = torch._C._is_tracing


def capturing() -> bool:
    return _compiling() or _tracing()
