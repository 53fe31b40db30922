"""Attention as the trace shows it: hand-written attention (a softmax between two matrix
products, as ``(q @ k.T).softmax(-1) @ v`` records it) against PyTorch's fused
``scaled_dot_product_attention``. Counted on the host's operators of the profiled steps, so a
CPU trace shows it as a GPU one does; a softmax inside an SDPA operator (its math path) is
SDPA's own."""

from __future__ import annotations

import numpy as np

# how many outermost operators before and after a softmax its matrix products may be (a
# scale, a mask, a cast, a dropout)
NEAR = 6
_PRODUCTS = ("aten::matmul", "aten::bmm", "aten::baddbmm", "aten::einsum")


def _sdpa(name: str) -> bool:
    return name.startswith(("aten::scaled_dot_product_attention", "aten::_scaled_dot_product",
                            "aten::_flash_attention", "aten::_efficient_attention")) or "flash_attn" in name


def summary(model, win: np.ndarray, n: int) -> dict:
    """{"manual_per_step": softmaxes between two matrix products outside any SDPA operator, a
    step; "sdpa_per_step": SDPA operators a step} over the steps ``win`` ([start, end] rows)."""
    cpu = model.cpu
    ops = np.flatnonzero(cpu.cat == 0)
    if not len(ops) or not len(win):
        return {"manual_per_step": 0.0, "sdpa_per_step": 0.0}
    ts, end, names, tid = cpu.ts[ops], cpu.ts[ops] + cpu.dur[ops], cpu.name_id[ops], cpu.tid[ops]
    in_step = np.zeros(len(ops), dtype=bool)
    for a, b in win:
        in_step |= (ts >= a) & (ts < b)
    soft = model.name_mask(lambda s: s == "aten::softmax")[names] & in_step
    sdpa = model.name_mask(_sdpa)[names] & in_step
    product = model.name_mask(lambda s: s in _PRODUCTS)[names]
    outer = _outermost(ts, end, tid, in_step)
    manual = 0
    for t in np.unique(tid[soft & outer]):
        same = np.flatnonzero(outer & (tid == t))      # the thread's outermost operators, in order
        for k in np.flatnonzero(soft[same]):
            if product[same[max(0, k - NEAR):k]].any() and product[same[k + 1:k + 1 + NEAR]].any():
                manual += 1
    return {"manual_per_step": manual / n, "sdpa_per_step": float((sdpa & outer).sum()) / n}


def _outermost(ts: np.ndarray, end: np.ndarray, tid: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """The operators (of ``keep``, sorted by start) no other operator of their thread holds: a
    softmax inside an SDPA operator, or a matmul's own bmm, is not one. An operator is outermost
    when it starts once every earlier one of its thread has ended."""
    out = np.zeros(len(ts), dtype=bool)
    for t in np.unique(tid[keep]):
        idx = np.flatnonzero(keep & (tid == t))
        ended = np.concatenate(([-np.inf], np.maximum.accumulate(end[idx])[:-1]))
        out[idx] = ts[idx] >= ended
    return out
