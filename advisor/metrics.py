"""Metrics over a TraceModel (docs/internals.md §3): pure functions, JSON-ready output.

Conventions (documented in docs/internals.md §3):
- A runtime call or CPU op belongs to a step when it *starts* inside the step's host range; a
  GPU op belongs to the step whose host range launched it (its own start when its launch is not
  in the trace).
- Time on the GPU is measured over windows that follow the GPU (``follow_gpu``): a step lasts
  until the GPU work launched in it has finished, and the next starts no earlier. Step times,
  ``breakdown`` and ``gpu_busy_pct`` use these windows.
- Per-step quantities are totals over the trace's steps divided by the number of steps, except
  ``breakdown`` (per-phase median, rescaled so it sums exactly to ``step_time_ms``) and
  ``gpu_kernel_ms_per_step`` (median over steps).
- "GPU ops" are kernels, memcpys and memsets; ``kernel_time_by_class`` and the per-class figures
  cover all three (classes ``memcpy`` and ``fill_memset``), ``kernels_per_step`` only kernels.
- ``breakdown`` with a GPU: each instant of a step is charged to the launch phase of the GPU
  op running then (the earliest-started one when ops overlap); idle instants go to data_wait /
  h2d when the CPU is in that phase, else gpu_idle. Without GPU activity: the CPU phase.
"""

from __future__ import annotations

import numpy as np

from advisor.trace import attention
from advisor.trace.classify import CLASSES, CODE, is_tf32
from advisor.trace.intervals import (
    clip,
    in_windows,
    overlap,
    union_pieces,
    window_index,
)
from advisor.trace.model import TraceModel, steps_from
from advisor.trace.phases import OTHER, PHASES, GpuOps, P, Timeline, gpu_ops, timeline
from advisor.trace.syncs import blocked_ms_per_step, sync_episodes

__all__ = ["analyze", "union_pieces", "step_breakdown_gpu", "step_breakdown_cpu",
           "combine_breakdown", "PHASES"]

TOP_KERNELS = 15
SHORT_KERNEL_US = 20.0


# --- step windows ----------------------------------------------------------------------

def follow_gpu(win: np.ndarray, launch: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Step windows stretched to the GPU work launched in them.

    The host runs ahead of a busy GPU: a profiled step's host range can end while its kernels
    are still queued (on a GPU-bound step the host's ranges are far shorter than a step timed:
    docs/measurement.md), and a rank waiting in an all-reduce does its waiting after
    its host step is over. So a step ends when both its host range and the GPU ops launched in
    it have ended, and starts when both its host range has started and the GPU ops launched
    before it have ended (the previous step's, or those of the steps before the trace's first).
    The windows stay disjoint and in order; on a host-bound trace (the GPU done before the host
    moves on) they are the host's own."""
    if not len(win) or not len(launch):
        return win
    k = window_index(launch, win)
    gpu_end = np.full(len(win), -np.inf)
    np.maximum.at(gpu_end, k[k >= 0], end[k >= 0])
    before = launch < win[0, 0]
    out = win.copy()
    prev_end = float(end[before].max()) if before.any() else -np.inf
    for i in range(len(out)):
        out[i, 0] = max(out[i, 0], prev_end)
        out[i, 1] = max(out[i, 1], gpu_end[i], out[i, 0])
        prev_end = out[i, 1]
    return out


# --- breakdown -------------------------------------------------------------------------

def step_breakdown_gpu(tl: Timeline, pieces, lo: float, hi: float) -> np.ndarray:
    """Per-phase microseconds of one step window, GPU-centric; sums to hi - lo."""
    ps, pe, lab = pieces
    out = np.zeros(len(PHASES))
    cs, ce, sl = clip(ps, pe, lo, hi)
    out += np.bincount(lab[sl], weights=ce - cs, minlength=len(PHASES))[: len(PHASES)]
    idle = (hi - lo) - float(np.sum(ce - cs))
    for phase in ("data_wait", "h2d"):
        s, e = tl.segments(P[phase], lo, hi)
        idle_here = float(np.sum(e - s)) - overlap(s, e, cs, ce)
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
    med = np.median(per_step, axis=0) / 1000.0 if len(per_step) else np.zeros(len(PHASES))
    total = med.sum()
    med = med * (step_ms / total) if total > 0 else med
    vals = [round(float(v), 4) for v in med]
    if total > 0:  # put the rounding residue on the largest phase so the sum is exact
        big = int(np.argmax(vals))
        vals[big] = round(vals[big] + (round(step_ms, 4) - sum(vals)), 4)
    return dict(zip(PHASES, vals))


# --- per-topic summaries ------------------------------------------------------------------

def _memcpy_summary(model: TraceModel, sel: np.ndarray, n: int) -> dict:
    """{kind: per-step bytes, ms, count, and pageable / pinned split of the host side}."""
    m = model.memcpy
    out = {}
    for kind in (np.unique(m.kind[sel]) if sel.any() else []):
        r = sel & (m.kind == kind)
        host = m.src if kind == "HtoD" else m.dst   # the host side decides pageable vs pinned
        pg, pn = r & (host == "Pageable"), r & (host == "Pinned")
        out[str(kind)] = {
            "bytes": float(m.bytes[r].sum()) / n, "ms": float(m.dur[r].sum()) / 1000 / n,
            "count": float(r.sum()) / n,
            "pageable_bytes": float(m.bytes[pg].sum()) / n, "pinned_bytes": float(m.bytes[pn].sum()) / n,
            "pageable_ms": float(m.dur[pg].sum()) / 1000 / n, "pinned_ms": float(m.dur[pn].sum()) / 1000 / n}
    return out


def _memory(model: TraceModel, child: dict | None) -> dict:
    """Peak from GPU [memory] events, capacity from deviceProperties; child.json fills gaps."""
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


def _kernel_stats(model: TraceModel, ops: GpuOps, step: np.ndarray, n_steps: int) -> dict:
    sel = step >= 0
    n = max(n_steps, 1)
    dur = ops.end - ops.start
    t = np.bincount(ops.cls[sel], weights=dur[sel], minlength=len(CLASSES))[: len(CLASSES)]
    total = t.sum()
    ksel = sel & (ops.kind == 0)
    kdur = dur[ksel]
    per_step = np.bincount(step[sel], weights=dur[sel], minlength=n_steps) / 1000
    phase_class, phase_count = {}, {}
    for code, phase in enumerate(PHASES):
        here = sel & (ops.phase == code)
        if here.any():
            c = np.bincount(ops.cls[here], weights=dur[here], minlength=len(CLASSES))
            phase_class[phase] = {CLASSES[i]: float(v) / 1000 / n for i, v in enumerate(c) if v}
            if (here & (ops.kind == 0)).any():
                phase_count[phase] = float((here & (ops.kind == 0)).sum()) / n
    return {
        "kernel_time_by_class": {c: (float(v / total) if total else 0.0) for c, v in zip(CLASSES, t)},
        "kernel_time_ms_by_class": {c: float(v) / 1000 / n for c, v in zip(CLASSES, t)},
        "gpu_kernel_ms_per_step": float(np.median(per_step)) if len(per_step) else 0.0,
        "phase_class_ms": phase_class,
        "phase_kernel_count": phase_count,
        "kernels_per_step": float(ksel.sum()) / n,
        "mean_kernel_us": float(kdur.mean()) if len(kdur) else None,
        "short_kernel_frac": float((kdur < SHORT_KERNEL_US).mean()) if len(kdur) else 0.0,
        "top_kernels": _top_kernels(model, ops, ksel, n),
        **_tf32_time(model, ops, ksel, n, total),
    }


def _tf32_time(model: TraceModel, ops: GpuOps, ksel: np.ndarray, n: int, total: float) -> dict:
    """Matmul/conv kernel time whose math is TF32: fp32 training that AMP would halve."""
    if not ksel.any():
        return {"tf32_gemm_conv_frac": 0.0, "tf32_gemm_conv_ms_per_step": 0.0}
    nid = model.kernels.name_id[ops.row[ksel]]
    by_name = np.bincount(nid, weights=(ops.end - ops.start)[ksel])
    tf32 = sum(float(by_name[i]) for i in np.flatnonzero(by_name) if is_tf32(model.names[i]))
    return {"tf32_gemm_conv_frac": float(tf32 / total) if total else 0.0,
            "tf32_gemm_conv_ms_per_step": tf32 / 1000 / n}


def _top_kernels(model: TraceModel, ops: GpuOps, ksel: np.ndarray, n: int) -> list[dict]:
    """The kernels with the most time per step; cls is the class holding most of its time."""
    if not ksel.any():
        return []
    nid = model.kernels.name_id[ops.row[ksel]]
    kdur = (ops.end - ops.start)[ksel]
    by_name, counts = np.bincount(nid, weights=kdur), np.bincount(nid)
    out = []
    for i in np.argsort(-by_name)[:TOP_KERNELS]:
        if counts[i] == 0:
            continue
        m = nid == i
        cls = np.bincount(ops.cls[ksel][m], weights=kdur[m], minlength=len(CLASSES))
        out.append({"name": model.names[i], "cls": CLASSES[int(np.argmax(cls))],
                    "ms": float(by_name[i]) / 1000 / n, "count": float(counts[i]) / n,
                    "mean_us": float(by_name[i] / counts[i])})
    return out


def _communication(model: TraceModel, ops: GpuOps, sel: np.ndarray, win: np.ndarray, n: int) -> dict:
    """Collective time per step and the part of it with no compute beside it (exposed).

    NCCL kernels in the steps: the GPU path (summed NCCL kernel time; exposed = the union of
    NCCL kernels not overlapped by any other kernel). Without them: the CPU-side collective ops
    (``gloo:all_reduce`` etc., see ``_cpu_communication``)."""
    comm = sel & (ops.cls == CODE["communication"])
    if not comm.any():
        return _cpu_communication(model, ops, win, n)
    cs, ce, _ = union_pieces(ops.start[comm], ops.end[comm], np.zeros(int(comm.sum()), np.int8))
    comp = sel & ~comm & (ops.kind == 0)
    ks, ke, _ = union_pieces(ops.start[comp], ops.end[comp], np.zeros(int(comp.sum()), np.int8))
    busy = float(np.sum(ce - cs))
    return {"ms_per_step": float(np.sum(ops.end[comm] - ops.start[comm])) / 1000 / n,
            "exposed_ms_per_step": (busy - overlap(cs, ce, ks, ke)) / 1000 / n, "source": "nccl"}


# CPU-side collectives: ProcessGroupGloo runs each collective on one of its ``pt_gloo_runloop``
# threads inside a ``gloo:<collective>`` range (user_annotation; torch 2.14 names: all_reduce,
# sparse_all_reduce, broadcast, reduce, all_gather, gather, scatter, all_to_all, barrier, send,
# recv). The range lasts from the start of the collective to its completion, waiting for the
# peers included, so it is the CPU twin of an NCCL kernel. (The calling thread only records the
# enqueue, ``c10d::allreduce_`` etc.; torch 2.14's gloo path emits no ``record_param_comms``:
# tests/fixtures/traces/README.md.)
CPU_COLLECTIVE_PREFIXES = ("gloo:",)
# Ops that are communication or its bookkeeping, never compute: the collectives themselves, the
# c10d enqueue/wait ops and NCCL's CPU-side ranges.
COMM_OP_PREFIXES = CPU_COLLECTIVE_PREFIXES + ("nccl:", "c10d::", "_c10d_functional::",
                                              "c10d_functional::", "record_param_comms")


def _zero_comm() -> dict:
    return {"ms_per_step": 0.0, "exposed_ms_per_step": 0.0, "source": None}


def _subtract(ps: np.ndarray, pe: np.ndarray, qs: np.ndarray, qe: np.ndarray):
    """Disjoint sorted pieces p minus disjoint sorted pieces q (both from union_pieces)."""
    if not len(ps) or not len(qs):
        return ps, pe
    bounds = np.unique(np.concatenate([ps, pe, qs, qe]))
    mid = (bounds[:-1] + bounds[1:]) / 2

    def inside(s, e):
        i = np.searchsorted(s, mid, "right") - 1
        return (i >= 0) & (mid < e[np.maximum(i, 0)])

    keep = inside(ps, pe) & ~inside(qs, qe)
    s, e = bounds[:-1][keep], bounds[1:][keep]
    if not len(s):
        return s, e
    join = np.flatnonzero(s[1:] > e[:-1])  # merge touching elementary pieces
    return np.concatenate([s[:1], s[1:][join]]), np.concatenate([e[:-1][join], e[-1:]])


def _cpu_communication(model: TraceModel, ops: GpuOps, win: np.ndarray, n: int) -> dict:
    """Collectives seen as CPU ops (gloo): per step, the union of the collective ranges that
    start in the step (nested or concurrent ranges, e.g. two runloop threads, count once), and
    the part of that union during which no compute runs.

    Compute = per thread, the time covered by ``cpu_op`` rows that are not communication
    (COMM_OP_PREFIXES) minus the time covered by communication ops on that thread; plus GPU
    kernels when the trace has any. Why:
    - on the CPU the collective runs on gloo's own thread, while forward/backward/optimizer ops run
      on the main (or autograd) thread; a collective is hidden exactly when the rank's other threads
      are doing work meanwhile (DDP's bucketed all-reduce during the rest of backward), and exposed
      when they have nothing to do but wait for it (DDP's ``finalize_backward`` wait after the
      last bucket, a manual all_reduce after backward). A thread blocked in the wait records no
      cpu_op, so the gap is exposed time.
    - user_annotation / python_function ranges (``advisor::backward``, ``DDP.forward``,
      ``ProfilerStep#``) are not compute: they span the waits too.
    - the enqueue (``c10d::allreduce_``, milliseconds for a large bucket: the fixtures' README) is
      not compute although its parent (``autograd::engine::evaluate_function: AccumulateGrad``,
      DDP's hook) is a cpu_op: hence the per-thread subtraction rather than dropping whole ops.
      The same removes ops nested inside a collective on its own thread (its copies) and the
      part of an op that waits for a collective run on the caller's thread.
    - ops of every phase count (data loading work hides communication as well as backward does),
      and they are not limited to the step windows: only their overlap with the collectives counts.
    Per step = total over the trace's steps / number of steps, as for NCCL."""
    cpu = model.cpu
    if not len(cpu) or not len(win):
        return _zero_comm()
    start, end = cpu.ts, cpu.ts + cpu.dur
    coll = model.name_mask(lambda s: s.startswith(CPU_COLLECTIVE_PREFIXES))[cpu.name_id]
    coll &= in_windows(cpu.ts, win)
    if not coll.any():
        return _zero_comm()
    cs, ce, _ = union_pieces(start[coll], end[coll], np.zeros(int(coll.sum()), np.int8))
    comm_like = model.name_mask(lambda s: s.startswith(COMM_OP_PREFIXES))[cpu.name_id]
    work = (cpu.cat == 0) & ~comm_like
    KS, KE = [], []
    for tid in np.unique(cpu.tid[work]):
        on = cpu.tid == tid
        w, c = work & on, comm_like & on
        ws, we, _ = union_pieces(start[w], end[w], np.zeros(int(w.sum()), np.int8))
        qs, qe, _ = union_pieces(start[c], end[c], np.zeros(int(c.sum()), np.int8))
        ws, we = _subtract(ws, we, qs, qe)
        KS.append(ws); KE.append(we)
    ks, ke = (np.concatenate(KS), np.concatenate(KE)) if KS else (np.empty(0), np.empty(0))
    if len(ops):  # a GPU trace with CPU collectives (gloo on CUDA tensors): kernels are compute
        k = ops.kind == 0
        ks, ke = np.concatenate([ks, ops.start[k]]), np.concatenate([ke, ops.end[k]])
    ks, ke, _ = union_pieces(ks, ke, np.zeros(len(ks), np.int8))
    busy = float(np.sum(ce - cs))
    return {"ms_per_step": busy / 1000 / n,
            "exposed_ms_per_step": (busy - overlap(cs, ce, ks, ke)) / 1000 / n,
            "source": "cpu"}


def _syncs(model: TraceModel, win: np.ndarray, n: int) -> dict:
    ts, names, raw = sync_episodes(model)
    inside = in_windows(ts, win)
    counts: dict[str, int] = {}
    for name, ok in zip(names, inside.tolist()):
        if ok:
            counts[name] = counts.get(name, 0) + 1
    return {
        "syncs_per_step": float(inside.sum()) / n,
        # host time blocked in them, profiled (the profiler slows the host, so this can
        # understate the unprofiled waits: the runner times .item() in the window too)
        "sync_blocked_ms_per_step": blocked_ms_per_step(model, win),
        "syncs": [{"name": k, "per_step": v / n} for k, v in sorted(counts.items(), key=lambda x: -x[1])],
        "sync_calls_per_step": {k: float(in_windows(v, win).sum()) / n for k, v in raw.items()},
    }


def _launch_ms(model: TraceModel, win: np.ndarray, n: int) -> float:
    """CPU time per step in kernel-launch runtime calls, all threads (backward launches from
    autograd's thread count as much as the main thread's)."""
    rt = model.runtime
    if not len(rt):
        return 0.0
    rows = model.name_mask(lambda s: "Launch" in s)[rt.name_id] & in_windows(rt.ts, win)
    return float(rt.dur[rows].sum()) / 1000 / n


# --- analyze ---------------------------------------------------------------------------

def analyze(model: TraceModel, child: dict | None = None) -> dict:
    """All metrics of docs/internals.md §3 for one trace (``child`` fills memory gaps)."""
    tl = timeline(model)
    ops = gpu_ops(model, tl)
    has_gpu = model.has_gpu
    win = steps_from(model.steps)          # the host's ranges
    gwin = follow_gpu(win, ops.launch, ops.end) if has_gpu else win
    n = max(len(win), 1)
    durs = gwin[:, 1] - gwin[:, 0]
    step_ms = round(float(np.median(durs)) / 1000, 4) if len(durs) else 0.0
    busy_pct = None
    if has_gpu:
        pieces = union_pieces(ops.start, ops.end, ops.phase)
        per_step = np.array([step_breakdown_gpu(tl, pieces, a, b) for a, b in gwin])
        busy = sum(float(np.sum(e - s)) for s, e, _ in (clip(pieces[0], pieces[1], a, b) for a, b in gwin))
        busy_pct = 100.0 * busy / float(durs.sum()) if durs.sum() > 0 else None
    else:
        per_step = np.array([step_breakdown_cpu(tl, a, b) for a, b in win])
    op_step = window_index(ops.launch, win)   # the step that launched each GPU op
    sel = op_step >= 0
    out = {
        "step_time_ms": step_ms,
        "step_time_spread_ms": float(np.subtract(*np.percentile(durs, [75, 25]))) / 1000
        if len(durs) else 0.0,
        "steps_in_trace": len(model.steps),
        "trace_step_times_ms": [float(d) / 1000 for d in durs],
        "step_source": _step_source(model),
        "has_gpu": has_gpu,
        "phase_sources": tl.sources,
        "breakdown": combine_breakdown(per_step.reshape(-1, len(PHASES)), step_ms),
        "gpu_busy_pct": busy_pct,
        "cpu_launch_ms_per_step": _launch_ms(model, win, n),
        "memcpy": _memcpy_summary(model, sel[ops.kind == 1], n),
        "memory": _memory(model, child),
        "trace_path": model.meta.get("trace_path"),
    }
    out.update(_syncs(model, win, n))
    out.update(_kernel_stats(model, ops, op_step, len(win)))
    out["communication"] = _communication(model, ops, sel, win, n)
    out["attention"] = attention.summary(model, win, n)
    return out


def _step_source(model: TraceModel) -> str:
    label = model.steps[0][2] if model.steps else "trace"
    return "ProfilerStep" if label.startswith("ProfilerStep") else \
        "optimizer" if label.startswith("opt#") else "trace"
