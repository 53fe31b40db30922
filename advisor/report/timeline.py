"""One representative training step of a trace, as lanes of [start, end) segments for the report.

Pure functions of a TraceModel; the result is small plain JSON (times in ms from the step start):

    {"step": "ProfilerStep#2", "step_ms": 38.28, "steps": 3, "phases": [...PHASES...],
     "lanes": [{"name": "CPU: training phase", "kind": "cpu", "segs": [[s, e, phase, name], ...]},
                                  # phase: index into phases; -2 a sync wait, -3 GPU idle
               {"name": "CPU: waits for the GPU", "kind": "sync", ...},
               {"name": "GPU 0 · stream 7", "kind": "gpu", ...},
               {"name": "GPU idle (all streams)", "kind": "idle", ...}],
     "names": ["volta_sgemm_128x64_nn", ...],      # seg[3] indexes it (-1: none)
     "gpu_busy_ms": 19.6, "gpu_idle_ms": 18.6, "gaps": [[s, e], ...]}   # longest idle gaps

The step is the median-duration step of the trace, over the windows the metrics use (a step
lasts until the GPU work it launched is done: advisor.metrics.follow_gpu). CPU segments are the
painted phase ranges (advisor::* annotations, else torch's; advisor.trace.phases). GPU segments
are the kernels, copies and memsets of one (device, stream) lane, merged when they are closer than a small gap
and launched from the same phase; a lane is re-merged with a wider gap until it has at most
``max_segs`` segments, so a report stays small whatever the trace. Each GPU segment keeps the
name of its longest op (untrusted text: the page only ever draws it on a canvas or as text).
"""

from __future__ import annotations

import numpy as np

from advisor.metrics import follow_gpu
from advisor.trace.model import steps_from
from advisor.trace.phases import OTHER, PHASES, gpu_ops, timeline as phase_timeline

MAX_SEGS = 300         # per lane
MIN_GAP_FRAC = 1e-3    # merge GPU ops closer than this fraction of the step (at least)
NAME_CHARS = 120


def representative_step(win: np.ndarray) -> int | None:
    """Index of the median-duration window (the lower median); None if none."""
    if not len(win):
        return None
    order = np.argsort(win[:, 1] - win[:, 0], kind="stable")
    return int(order[(len(order) - 1) // 2])


def merge_segments(start: np.ndarray, end: np.ndarray, key: np.ndarray, weight_id: np.ndarray,
                   gap: float) -> list[tuple[float, float, int, int]]:
    """Merge sorted-by-start intervals with equal ``key`` whose gap is <= ``gap``.

    Returns (start, end, key, id) where id is the ``weight_id`` of the longest member."""
    out: list[list] = []
    for s, e, k, w in zip(start.tolist(), end.tolist(), key.tolist(), weight_id.tolist()):
        if out and out[-1][2] == k and s - out[-1][1] <= gap:
            cur = out[-1]
            if e - s > cur[5]:
                cur[3], cur[5] = w, e - s
            cur[1] = max(cur[1], e)
        else:
            out.append([s, e, k, w, 0, e - s])
    return [(a, b, k, w) for a, b, k, w, _, _ in out]


def capped_merge(start, end, key, weight_id, step_us: float, max_segs: int = MAX_SEGS):
    """merge_segments with the smallest gap (doubling from MIN_GAP_FRAC of the step) that
    leaves at most max_segs segments; the last resort merges across keys."""
    gap = max(step_us * MIN_GAP_FRAC, 1.0)
    while True:
        segs = merge_segments(start, end, key, weight_id, gap)
        if len(segs) <= max_segs or gap > step_us:
            break
        gap *= 2.0
    if len(segs) > max_segs:  # alternating phases at a fine grain: one key for the lane
        segs = merge_segments(start, end, np.zeros_like(key), weight_id, gap)
    return segs


def _union_len(s: np.ndarray, e: np.ndarray) -> tuple[float, list[tuple[float, float]]]:
    """Length of the union of intervals and the gaps between its pieces."""
    if not len(s):
        return 0.0, []
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    total, gaps = 0.0, []
    cs, ce = s[0], e[0]
    for a, b in zip(s[1:].tolist(), e[1:].tolist()):
        if a > ce:
            total += ce - cs
            gaps.append((ce, a))
            cs, ce = a, b
        else:
            ce = max(ce, b)
    total += ce - cs
    return float(total), gaps


def step_timeline(model, step: int | None = None, max_segs: int = MAX_SEGS) -> dict | None:
    """The lanes of one step (the median one by default); None without steps."""
    tl = phase_timeline(model)
    ops = gpu_ops(model, tl) if model.has_gpu else None
    win = steps_from(model.steps)
    if ops is not None:
        win = follow_gpu(win, ops.launch, ops.end)
    idx = representative_step(win) if step is None else step
    if idx is None:
        return None
    lo, hi = (float(t) for t in win[idx])
    dur, label = hi - lo, model.steps[idx][2]
    ms = lambda t: round((float(t) - lo) / 1000.0, 4)  # noqa: E731
    names: list[str] = []
    name_ix: dict[int, int] = {}

    def name_of(table, row: int) -> int:
        nid = int(table.name_id[row]) if hasattr(table, "name_id") else -1
        if nid < 0:
            return -1
        if nid not in name_ix:
            name_ix[nid] = len(names)
            names.append(model.names[nid][:NAME_CHARS])
        return name_ix[nid]

    lanes = []
    cpu_s, cpu_e, cpu_k = [], [], []
    for code in range(len(PHASES)):
        if code == OTHER:
            continue
        s, e = tl.segments(code, lo, hi)
        cpu_s.append(s); cpu_e.append(e); cpu_k.append(np.full(len(s), code))
    if cpu_s and sum(len(s) for s in cpu_s):
        s, e, k = np.concatenate(cpu_s), np.concatenate(cpu_e), np.concatenate(cpu_k)
        order = np.argsort(s, kind="stable")
        segs = capped_merge(s[order], e[order], k[order], np.full(len(s), -1), dur, max_segs)
        lanes.append({"name": "CPU: training phase", "kind": "cpu",
                      "segs": [[ms(a), ms(b), int(c), -1] for a, b, c, _ in segs]})
    sync = _sync_segments(model, lo, hi)
    if sync is not None and len(sync[0]):
        s, e, rows = sync
        order = np.argsort(s, kind="stable")
        ids = np.array([name_of(model.runtime, int(r)) for r in rows[order]])
        segs = capped_merge(s[order], e[order], np.full(len(s), -2), ids, dur, max_segs)
        lanes.append({"name": "CPU: waits for the GPU", "kind": "sync",
                      "segs": [[ms(a), ms(b), -2, int(w)] for a, b, _, w in segs]})
    busy, gaps = 0.0, []
    if ops is not None:
        dev = np.concatenate([model.kernels.device, model.memcpy.device, model.memset.device])
        stream = np.concatenate([model.kernels.stream, model.memcpy.stream, model.memset.stream])
        inside = (ops.start < hi) & (ops.end > lo)
        gs, ge = np.clip(ops.start[inside], lo, hi), np.clip(ops.end[inside], lo, hi)
        busy, gaps = _union_len(gs, ge)
        tables = (model.kernels, model.memcpy, model.memset)
        for d, st in sorted(set(zip(dev[inside].tolist(), stream[inside].tolist()))):
            sel = np.flatnonzero(inside & (dev == d) & (stream == st))
            sel = sel[np.argsort(ops.start[sel], kind="stable")]
            ids = np.array([name_of(tables[int(ops.kind[i])], int(ops.row[i])) for i in sel])
            segs = capped_merge(np.clip(ops.start[sel], lo, hi), np.clip(ops.end[sel], lo, hi),
                                ops.phase[sel].astype(np.int64), ids, dur, max_segs)
            lanes.append({"name": f"GPU {d} · stream {st}", "kind": "gpu",
                          "segs": [[ms(a), ms(b), int(c), int(w)] for a, b, c, w in segs]})
        if len(gs):  # idle before the first and after the last GPU op count as gaps too
            gaps = [(lo, float(gs.min()))] + gaps + [(float(ge.max()), hi)]
    gaps = sorted((g for g in gaps if g[1] > g[0]), key=lambda g: g[0] - g[1])
    shown = sorted(g for g in gaps[:max_segs] if g[1] - g[0] >= max(dur * 2e-3, 1.0))
    if shown:
        lanes.append({"name": "GPU idle (all streams)", "kind": "idle",
                      "segs": [[ms(a), ms(b), -3, -1] for a, b in shown]})
    gaps = gaps[:3]
    return {
        "step": label, "step_ms": round(dur / 1000.0, 4), "steps": len(model.steps),
        "phases": list(PHASES), "lanes": lanes, "names": names,
        "gpu_busy_ms": round(busy / 1000.0, 4) if model.has_gpu else None,
        "gpu_idle_ms": round((dur - busy) / 1000.0, 4) if model.has_gpu else None,
        "gaps": [[ms(a), ms(b)] for a, b in gaps] if model.has_gpu else [],
    }


def _sync_segments(model, lo: float, hi: float):
    """Blocking runtime calls (the CPU waiting on the GPU) inside [lo, hi): (starts, ends, rows)."""
    try:
        from advisor.trace.syncs import _blocking_runtime_rows
        rows = _blocking_runtime_rows(model)
    except Exception:  # noqa: BLE001 - a lane of the picture, never worth failing the report
        return None
    rt = model.runtime
    if not len(rows):
        return None
    s, e = rt.ts[rows], rt.ts[rows] + rt.dur[rows]
    keep = (s < hi) & (e > lo)
    return np.clip(s[keep], lo, hi), np.clip(e[keep], lo, hi), rows[keep]


def timeline_from_file(path) -> tuple[dict | None, str | None]:
    """(timeline, error) for a trace file; the error is one line for the report."""
    from advisor.trace import TraceError, load_trace
    try:
        return step_timeline(load_trace(path)), None
    except (TraceError, OSError, ValueError) as exc:
        return None, str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    except Exception as exc:  # noqa: BLE001 - a picture is never worth failing the report
        return None, f"internal error drawing the step: {type(exc).__name__}: {exc}"
