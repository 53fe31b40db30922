"""Metrics over a TraceModel (internals.md §3): pure functions, JSON-ready output.

Conventions (all documented in internals.md §3):
- A GPU op, runtime call or CPU op belongs to a step when it *starts* inside the step window.
- Per-step quantities are totals over the trace's steps divided by the number of steps, except
  ``breakdown`` (per-phase median, rescaled so it sums exactly to ``step_time_ms``).
- ``breakdown`` with a GPU: each instant of a step is charged to the launch phase of the GPU
  op running then (the earliest-started one when ops overlap); idle instants go to data_wait /
  h2d when the CPU is in that phase, else gpu_idle. Without GPU activity: the CPU phase.
"""

from __future__ import annotations

import numpy as np

from advisor.trace.classify import CLASSES
from advisor.trace.model import TraceModel, steps_from
from advisor.trace.phases import OTHER, P, PHASES, GpuOps, Timeline, gpu_ops, lookup, timeline

SYNC_CALLS = {"cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
              "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize"}
SYNC_MEMCPY_CALLS = {"cudaMemcpy", "cudaMemcpyAsync", "cuMemcpy", "cuMemcpyAsync",
                     "cuMemcpyDtoH", "cuMemcpyDtoHAsync", "cudaMemcpy2D", "cudaMemcpy2DAsync"}
ITEM_OPS = {"aten::item", "aten::_local_scalar_dense"}
TOP_KERNELS = 15


# --- interval helpers ------------------------------------------------------------------

def union_pieces(start: np.ndarray, end: np.ndarray, label: np.ndarray):
    """Disjoint sorted pieces covering the union of intervals; each instant keeps the label of
    the earliest-started interval covering it (so every instant is charged exactly once)."""
    order = np.argsort(start, kind="stable")
    s, e, lab = start[order], end[order], label[order]
    if not len(s):
        return s, e, lab
    reach = np.maximum.accumulate(e)
    ps = np.maximum(s, np.concatenate([[-np.inf], reach[:-1]]))
    keep = e > ps
    return ps[keep], e[keep], lab[keep]


def _clip(ps, pe, lo, hi):
    i0 = np.searchsorted(pe, lo, "right")
    i1 = np.searchsorted(ps, hi, "left")
    return np.clip(ps[i0:i1], lo, hi), np.clip(pe[i0:i1], lo, hi), slice(i0, i1)


def _overlap(a_s, a_e, ps, pe) -> float:
    """Measure of (union of intervals a) ∩ (disjoint sorted pieces p); a is disjoint too."""
    if not len(a_s) or not len(ps):
        return 0.0
    cum = np.concatenate([[0.0], np.cumsum(pe - ps)])

    def upto(t):
        i = np.searchsorted(ps, t, "right")
        j = np.maximum(i - 1, 0)
        part = np.where(i > 0, np.clip(t - ps[j], 0.0, pe[j] - ps[j]), 0.0)
        return cum[j] + part

    return float(np.sum(upto(a_e) - upto(a_s)))


# --- breakdown -------------------------------------------------------------------------

def step_breakdown_gpu(tl: Timeline, pieces, lo: float, hi: float) -> np.ndarray:
    """Per-phase microseconds of one step window, GPU-centric; sums to hi - lo."""
    ps, pe, lab = pieces
    out = np.zeros(len(PHASES))
    cs, ce, sl = _clip(ps, pe, lo, hi)
    out += np.bincount(lab[sl], weights=ce - cs, minlength=len(PHASES))[: len(PHASES)]
    idle = (hi - lo) - float(np.sum(ce - cs))
    for phase in ("data_wait", "h2d"):
        s, e = tl.segments(P[phase], lo, hi)
        idle_here = float(np.sum(e - s)) - _overlap(s, e, cs, ce)
        out[P[phase]] += idle_here
        idle -= idle_here
    out[P["gpu_idle"]] += max(idle, 0.0)
    return out


def step_breakdown_cpu(tl: Timeline, lo: float, hi: float) -> np.ndarray:
    """Per-phase microseconds of one step window from the CPU phase timeline alone."""
    out = np.zeros(len(PHASES))
    for code in range(len(PHASES)):
        if code != OTHER:
            s, e = tl.segments(code, lo, hi)
            out[code] = float(np.sum(e - s))
    out[OTHER] = (hi - lo) - out.sum()
    return out


def combine_breakdown(per_step: np.ndarray, step_ms: float) -> dict[str, float]:
    """Per-phase median over steps, rescaled to sum exactly to the median step time."""
    med = np.median(per_step, axis=0) / 1000.0
    total = med.sum()
    med = med * (step_ms / total) if total > 0 else med
    vals = [round(float(v), 4) for v in med]
    if total > 0:  # put the rounding residue on the largest phase so the sum is exact
        big = int(np.argmax(vals))
        vals[big] = round(vals[big] + (round(step_ms, 4) - sum(vals)), 4)
    return dict(zip(PHASES, vals))


# --- syncs -----------------------------------------------------------------------------

def _top_level_ops(model: TraceModel) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per tid: (starts, ends) of top-level cpu_op rows (not nested in another cpu_op)."""
    cpu = model.cpu
    rows = np.flatnonzero(cpu.cat == 0)
    out = {}
    for tid in np.unique(cpu.tid[rows]):
        r = rows[cpu.tid[rows] == tid]
        s, e = cpu.ts[r], cpu.ts[r] + cpu.dur[r]
        reach = np.concatenate([[-np.inf], np.maximum.accumulate(e)[:-1]])
        top = s >= reach
        out[int(tid)] = (s[top], e[top])
    return out


def sync_points(model: TraceModel) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Timestamps of host-blocking sync points, one per blocking episode, and the raw
    timestamps per call name.

    Counted: cuda*Synchronize calls; cudaMemcpy (synchronous API) unless device-to-device;
    cudaMemcpyAsync into pageable host memory (DtoH to pageable returns only when done);
    aten::item / aten::_local_scalar_dense. Candidates inside the same top-level cpu_op on the
    same thread (``.item()`` = aten::item + a DtoH copy + cudaStreamSynchronize) count once."""
    rt, cpu, names = model.runtime, model.cpu, model.names
    cand_ts, cand_tid, raw = [], [], {}
    if len(rt):
        sync_ids = model.name_mask(lambda n: n in SYNC_CALLS)[rt.name_id]
        mc_ids = model.name_mask(lambda n: n in SYNC_MEMCPY_CALLS)[rt.name_id]
        blocking = sync_ids.copy()
        mc_rows = np.flatnonzero(mc_ids)
        if len(mc_rows) and len(model.memcpy):
            m = model.memcpy
            j = lookup(m.correlation, rt.correlation[mc_rows])
            ok = j >= 0
            jj = np.maximum(j, 0)
            is_async = np.array(["Async" in names[i] for i in rt.name_id[mc_rows]], dtype=bool)
            dtoh_pageable = (m.kind[jj] == "DtoH") & (m.dst[jj] == "Pageable")
            sync_api = ~is_async & (m.kind[jj] != "DtoD")
            blocking[mc_rows[ok & (dtoh_pageable | sync_api)]] = True
        rows = np.flatnonzero(blocking)
        cand_ts.append(rt.ts[rows]); cand_tid.append(rt.tid[rows])
        for i in rows:
            raw.setdefault(names[rt.name_id[i]], []).append(rt.ts[i])
    if model.has_gpu or model.meta.get("device_properties"):
        rows = model.cpu_where(lambda n: n in ITEM_OPS)
        if len(rows):
            cand_ts.append(cpu.ts[rows]); cand_tid.append(cpu.tid[rows])
            for i in rows:
                raw.setdefault(names[cpu.name_id[i]], []).append(cpu.ts[i])
    if not cand_ts:
        return np.empty(0), {}
    ts, tid = np.concatenate(cand_ts), np.concatenate(cand_tid)
    tops = _top_level_ops(model)
    seen, keep = set(), []
    for k in np.argsort(ts, kind="stable"):
        s, e = tops.get(int(tid[k]), (np.empty(0), np.empty(0)))
        i = int(np.searchsorted(s, ts[k], "right")) - 1
        key = (int(tid[k]), i) if i >= 0 and ts[k] <= e[i] else ("solo", int(k))
        if key not in seen:
            seen.add(key)
            keep.append(ts[k])
    return np.asarray(keep), {n: np.asarray(v) for n, v in raw.items()}


# --- analyze ---------------------------------------------------------------------------

def _in_steps(ts: np.ndarray, win: np.ndarray) -> np.ndarray:
    """Boolean: does each timestamp fall inside some step window?"""
    if not len(win) or not len(ts):
        return np.zeros(len(ts), dtype=bool)
    order = np.argsort(win[:, 0])
    s, e = win[order, 0], win[order, 1]
    i = np.searchsorted(s, ts, "right") - 1
    ok = i >= 0
    return ok & (ts < e[np.maximum(i, 0)])


def _memcpy_summary(model: TraceModel, sel: np.ndarray, n: int) -> dict:
    m = model.memcpy
    out = {}
    for kind in np.unique(m.kind[sel]) if sel.any() else []:
        r = sel & (m.kind == kind)
        host = m.src if kind == "HtoD" else m.dst   # the host side decides pageable vs pinned
        out[str(kind)] = {
            "bytes": int(m.bytes[r].sum()) / n, "ms": float(m.dur[r].sum()) / 1000 / n,
            "count": int(r.sum()) / n,
            "pageable_bytes": int(m.bytes[r & (host == "Pageable")].sum()) / n,
            "pinned_bytes": int(m.bytes[r & (host == "Pinned")].sum()) / n}
    return out


def _memory(model: TraceModel, child: dict | None) -> dict:
    mem, props = model.memory, model.meta.get("device_properties") or []
    gpu = mem.device >= 0
    out = {"peak_allocated_bytes": None, "peak_reserved_bytes": None, "capacity_bytes": None,
           "source": None}
    if gpu.any():
        i = int(np.argmax(np.where(gpu, mem.total_allocated, -1)))
        dev = int(mem.device[i])
        out.update(peak_allocated_bytes=int(mem.total_allocated[i]),
                   peak_reserved_bytes=int(mem.total_reserved[gpu].max()), source="trace")
        cap = [p.get("totalGlobalMem") for p in props if p.get("id", 0) == dev]
        out["capacity_bytes"] = cap[0] if cap else None
    elif props:
        out["capacity_bytes"] = props[0].get("totalGlobalMem")
    cm = (child or {}).get("memory") or {}
    if out["peak_allocated_bytes"] is None and cm.get("max_allocated_bytes") is not None:
        out.update(peak_allocated_bytes=cm["max_allocated_bytes"],
                   peak_reserved_bytes=cm.get("max_reserved_bytes"), source="child")
    if out["capacity_bytes"] is None:
        out["capacity_bytes"] = cm.get("capacity_bytes") or \
            ((child or {}).get("environment") or {}).get("gpu_memory_bytes")
    cpu_mem = mem.total_allocated[~gpu]
    out["cpu_peak_allocated_bytes"] = int(cpu_mem.max()) if len(cpu_mem) else None
    return out


def _kernel_stats(model: TraceModel, ops: GpuOps, sel: np.ndarray, n: int) -> dict:
    t = np.bincount(ops.cls[sel], weights=ops.end[sel] - ops.start[sel],
                    minlength=len(CLASSES))[: len(CLASSES)]
    total = t.sum()
    ksel = sel & (ops.kind == 0)
    kdur = (ops.end - ops.start)[ksel]
    top = []
    if ksel.any():
        nid = model.kernels.name_id[ops.row[ksel]]
        by_name = np.bincount(nid, weights=kdur)
        counts = np.bincount(nid)
        for i in np.argsort(-by_name)[:TOP_KERNELS]:
            if counts[i] == 0:
                continue
            m = nid == i
            cls = np.bincount(ops.cls[ksel][m], weights=kdur[m], minlength=len(CLASSES))
            top.append({"name": model.names[i], "cls": CLASSES[int(np.argmax(cls))],
                        "ms": float(by_name[i]) / 1000 / n, "count": float(counts[i]) / n,
                        "mean_us": float(by_name[i] / counts[i])})
    return {
        "kernel_time_by_class": {c: (float(v / total) if total else 0.0) for c, v in zip(CLASSES, t)},
        "kernel_time_ms_by_class": {c: float(v) / 1000 / n for c, v in zip(CLASSES, t)},
        "kernels_per_step": float(ksel.sum()) / n,
        "mean_kernel_us": float(kdur.mean()) if len(kdur) else None,
        "top_kernels": top,
    }


def analyze(model: TraceModel, child: dict | None = None) -> dict:
    """All metrics of internals.md §3 for one trace (``child`` fills memory gaps)."""
    win = steps_from(model.steps)
    n = max(len(win), 1)
    durs = win[:, 1] - win[:, 0]
    step_ms = float(np.median(durs)) / 1000 if len(durs) else 0.0
    tl = timeline(model)
    ops = gpu_ops(model, tl)
    has_gpu = model.has_gpu
    if has_gpu:
        pieces = union_pieces(ops.start, ops.end, ops.phase)
        per_step = np.array([step_breakdown_gpu(tl, pieces, a, b) for a, b in win])
        busy = sum(float(np.sum(ce - cs)) for cs, ce, _ in
                   (_clip(pieces[0], pieces[1], a, b) for a, b in win))
    else:
        per_step = np.array([step_breakdown_cpu(tl, a, b) for a, b in win])
        busy = 0.0
    sel = _in_steps(ops.start, win)
    syncs, raw = sync_points(model)
    out = {
        "step_time_ms": round(step_ms, 4),
        "step_time_spread_ms": float(np.subtract(*np.percentile(durs, [75, 25]))) / 1000
        if len(durs) else 0.0,
        "steps_in_trace": len(model.steps),
        "trace_step_times_ms": [float(d) / 1000 for d in durs],
        "step_source": _step_source(model),
        "has_gpu": has_gpu,
        "phase_sources": tl.sources,
        "breakdown": combine_breakdown(per_step.reshape(-1, len(PHASES)), round(step_ms, 4)),
        "gpu_busy_pct": (100.0 * busy / float(durs.sum())) if has_gpu and durs.sum() > 0 else None,
        "syncs_per_step": float(_in_steps(syncs, win).sum()) / n,
        "sync_calls_per_step": {k: float(_in_steps(v, win).sum()) / n for k, v in raw.items()},
        "memcpy": _memcpy_summary(model, sel[ops.kind == 1], n),
        "memory": _memory(model, child),
        "trace_path": model.meta.get("trace_path"),
    }
    out.update(_kernel_stats(model, ops, sel, n))
    return out


def _step_source(model: TraceModel) -> str:
    label = model.steps[0][2] if model.steps else "trace"
    return "ProfilerStep" if label.startswith("ProfilerStep") else \
        "optimizer" if label.startswith("opt#") else "trace"
