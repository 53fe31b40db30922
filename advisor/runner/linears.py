"""The model's linear layers and the GEMMs they run: how many ``nn.Linear`` there are, how many
of them torchao swapped for its float8 ``Float8Linear`` (the float8-training fix's check), and
at the model's first training call each layer's GEMM, M x K x N with M the rows it was fed
(tokens for a language model), the largest first. FP8 tensor cores pay only on large GEMMs: the
shapes say whether a model has them. A model torch.compile runs is counted, not watched (a hook
inside its graph would be traced into it)."""

from __future__ import annotations

import torch

from advisor.runner.logits import compiled
from advisor.runtime.capture import capturing

TOP = 8   # the largest GEMM shapes kept (a transformer has a handful: qkv, out, up, down, head)


def is_float8(module: torch.nn.Module) -> bool:
    """torchao's float8 training linear (by name: torchao need not be installed)."""
    return type(module).__name__ == "Float8Linear"


def watch(model: torch.nn.Module, record) -> None:
    """record({"count", "float8"}) now, and again with "gemms" and "flops_per_forward" once the
    model's next training forward has run (a fix that swaps layers at that call, as
    float8-training does, is counted as it ran)."""
    inner = getattr(model, "_orig_mod", model)
    if not any(isinstance(m, torch.nn.Linear) for m in inner.modules()):
        return
    record(_counts(inner))
    if compiled(model):
        return
    rows: dict[int, int] = {}   # id(layer) -> the rows it was fed

    def seen(module, args):
        if isinstance(module, torch.nn.Linear) and id(module) not in rows and module.training \
                and torch.is_grad_enabled() and not capturing():
            x = args[0] if args and isinstance(args[0], torch.Tensor) else None
            if x is not None:
                rows[id(module)] = int(x.numel() // max(1, module.in_features))

    def done(module, args, out):
        if capturing() or not rows:
            return   # an evaluation's forward (no training rows seen): the next call
        pre.remove()
        post.remove()
        record({**_counts(inner), **_gemms(inner, rows)})

    # every module's calls, not the layers' own hooks: a layer swapped after this (a fix at
    # the same forward) is seen as it runs
    pre = torch.nn.modules.module.register_module_forward_pre_hook(seen)
    post = model.register_forward_hook(done)


def _counts(inner: torch.nn.Module) -> dict:
    layers = [m for m in inner.modules() if isinstance(m, torch.nn.Linear)]
    return {"count": len(layers), "float8": sum(is_float8(m) for m in layers)}


def _gemms(inner: torch.nn.Module, rows: dict[int, int]) -> dict:
    """The forward's GEMMs by shape (M, K, N), the largest first, and their FLOPs (2 M K N each;
    the backward runs two more of each shape)."""
    shapes: dict[tuple[int, int, int], int] = {}
    for m in inner.modules():
        if isinstance(m, torch.nn.Linear) and id(m) in rows:
            key = (rows[id(m)], m.in_features, m.out_features)
            shapes[key] = shapes.get(key, 0) + 1
    ranked = sorted(shapes.items(), key=lambda kv: -kv[0][0] * kv[0][1] * kv[0][2] * kv[1])
    return {"gemms": [{"m": m, "k": k, "n": n, "layers": c} for (m, k, n), c in ranked[:TOP]],
            "flops_per_forward": sum(2 * m * k * n * c for (m, k, n), c in shapes.items())}
