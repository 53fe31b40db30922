"""Vectorized interval arithmetic on sorted numpy arrays (times in microseconds)."""

from __future__ import annotations

import numpy as np


def union_pieces(start: np.ndarray, end: np.ndarray, label: np.ndarray):
    """Disjoint sorted pieces covering the union of intervals; each instant keeps the label of
    the earliest-started interval covering it, so every instant is charged exactly once."""
    order = np.argsort(start, kind="stable")
    s, e, lab = start[order], end[order], label[order]
    if not len(s):
        return s, e, lab
    reach = np.maximum.accumulate(e)
    ps = np.maximum(s, np.concatenate([[-np.inf], reach[:-1]]))
    keep = e > ps
    return ps[keep], e[keep], lab[keep]


def clip(ps: np.ndarray, pe: np.ndarray, lo: float, hi: float):
    """Disjoint sorted pieces clipped to [lo, hi): (starts, ends, slice into the inputs)."""
    i0 = int(np.searchsorted(pe, lo, "right"))
    i1 = int(np.searchsorted(ps, hi, "left"))
    return np.clip(ps[i0:i1], lo, hi), np.clip(pe[i0:i1], lo, hi), slice(i0, i1)


def overlap(a_s: np.ndarray, a_e: np.ndarray, ps: np.ndarray, pe: np.ndarray) -> float:
    """Measure of (disjoint intervals a) ∩ (disjoint sorted pieces p)."""
    if not len(a_s) or not len(ps):
        return 0.0
    cum = np.concatenate([[0.0], np.cumsum(pe - ps)])

    def upto(t):  # measure of p ∩ (-inf, t]
        i = np.searchsorted(ps, t, "right")
        j = np.maximum(i - 1, 0)
        part = np.where(i > 0, np.clip(t - ps[j], 0.0, pe[j] - ps[j]), 0.0)
        return cum[j] + part

    return float(np.sum(upto(a_e) - upto(a_s)))


def window_index(ts: np.ndarray, win: np.ndarray) -> np.ndarray:
    """Index (into win, an (n, 2) array of [start, end)) of the window holding each timestamp;
    -1 outside every window. Windows must not overlap."""
    if not len(win) or not len(ts):
        return np.full(len(ts), -1, dtype=np.int64)
    order = np.argsort(win[:, 0], kind="stable")
    s, e = win[order, 0], win[order, 1]
    i = np.searchsorted(s, ts, "right") - 1
    ok = (i >= 0) & (ts < e[np.maximum(i, 0)])
    return np.where(ok, order[np.maximum(i, 0)], -1)


def in_windows(ts: np.ndarray, win: np.ndarray) -> np.ndarray:
    """Boolean: does each timestamp fall inside one of the [start, end) windows (n, 2)?"""
    return window_index(ts, win) >= 0
