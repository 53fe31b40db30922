"""Host-device synchronizations: points where the CPU waits for the GPU.

Counted, from the runtime calls (their names are what CUDA documents as blocking):
- ``cuda{Device,Stream,Event}Synchronize`` and their driver-API twins;
- ``cudaMemcpy`` (the synchronous API) unless device-to-device, which does not block the host;
- ``cudaMemcpyAsync`` into *pageable* host memory: a DtoH copy to pageable memory returns only
  when done (CUDA "API synchronization behavior"); into pinned memory it is truly async.
  Which copy a call made comes from its ``correlation`` to the ``gpu_memcpy`` event.
- the CPU ops ``aten::item`` / ``aten::_local_scalar_dense`` (``.item()``, ``bool(t)``...) only
  when a GPU trace has no runtime events: they are then the only evidence of a sync. With
  runtime events a CUDA ``.item()`` shows its blocking copy, and a CPU one is no sync.

One ``.item()`` shows up as aten::item > aten::_local_scalar_dense > cudaMemcpyAsync (DtoH) +
cudaStreamSynchronize: candidates inside the same top-level cpu_op on the same thread are one
episode, named after that op ("aten::item", "aten::to (cudaStreamSynchronize)").
"""

from __future__ import annotations

import numpy as np

from advisor.trace.intervals import in_windows
from advisor.trace.model import TraceModel

SYNC_CALLS = {"cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
              "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize"}
MEMCPY_CALLS = {"cudaMemcpy", "cudaMemcpyAsync", "cuMemcpy", "cuMemcpyAsync", "cuMemcpyDtoH",
                "cuMemcpyDtoHAsync", "cudaMemcpy2D", "cudaMemcpy2DAsync"}
ITEM_OPS = {"aten::item", "aten::_local_scalar_dense"}


def _blocking_runtime_rows(model: TraceModel) -> np.ndarray:
    rt, m, names = model.runtime, model.memcpy, model.names
    if not len(rt):
        return np.empty(0, dtype=np.int64)
    blocking = model.name_mask(lambda n: n in SYNC_CALLS)[rt.name_id]
    mc = np.flatnonzero(model.name_mask(lambda n: n in MEMCPY_CALLS)[rt.name_id])
    if len(mc) and len(m):
        from advisor.trace.phases import lookup
        j = lookup(m.correlation, rt.correlation[mc])
        jj = np.maximum(j, 0)
        is_async = np.array(["Async" in names[i] for i in rt.name_id[mc]], dtype=bool)
        to_pageable = (m.kind[jj] == "DtoH") & (m.dst[jj] == "Pageable")
        sync_api = ~is_async & (m.kind[jj] != "DtoD")
        blocking[mc[(j >= 0) & (to_pageable | sync_api)]] = True
    return np.flatnonzero(blocking)


def blocked_ms_per_step(model: TraceModel, win: np.ndarray) -> float | None:
    """Host time per step spent in blocking runtime calls (the CPU waiting for the GPU), from
    the calls' durations inside the step windows ``win`` (n, 2). None without runtime events
    (a CPU-only trace, or one recorded without them): not measured, not zero."""
    if not len(model.runtime):
        return None
    rows = _blocking_runtime_rows(model)
    rt = model.runtime
    return float(rt.dur[rows][in_windows(rt.ts[rows], win)].sum()) / 1000 / max(len(win), 1)


def _top_level_ops(model: TraceModel) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per tid: (starts, ends, cpu rows) of top-level cpu_op rows (not inside another cpu_op)."""
    cpu = model.cpu
    rows = np.flatnonzero(cpu.cat == 0)
    out = {}
    for tid in np.unique(cpu.tid[rows]):
        r = rows[cpu.tid[rows] == tid]
        s, e = cpu.ts[r], cpu.ts[r] + cpu.dur[r]
        reach = np.concatenate([[-np.inf], np.maximum.accumulate(e)[:-1]])
        top = s >= reach
        out[int(tid)] = (s[top], e[top], r[top])
    return out


def sync_episodes(model: TraceModel) -> tuple[np.ndarray, list[str], dict[str, np.ndarray]]:
    """(timestamps, names) of blocking episodes, and the raw timestamps per call/op name."""
    rt, cpu, names = model.runtime, model.cpu, model.names
    ts_l, tid_l, name_l = [], [], []
    rows = _blocking_runtime_rows(model)
    ts_l.append(rt.ts[rows]); tid_l.append(rt.tid[rows])
    name_l += [names[i] for i in rt.name_id[rows]]
    if (model.has_gpu or model.meta.get("device_properties")) and not len(rt):
        # Only without runtime events: otherwise the blocking copy + synchronize inside a
        # CUDA .item() are already counted above, and an .item() on a CPU tensor (a
        # Dataset reading a label, say) is no sync at all. On a CPU-only run: never.
        items = model.cpu_where(lambda n: n in ITEM_OPS)
        ts_l.append(cpu.ts[items]); tid_l.append(cpu.tid[items])
        name_l += [names[i] for i in cpu.name_id[items]]
    ts, tid = np.concatenate(ts_l), np.concatenate(tid_l)
    raw: dict[str, list] = {}
    for t, n in zip(ts.tolist(), name_l):
        raw.setdefault(n, []).append(t)
    tops = _top_level_ops(model)
    seen: set = set()
    out_ts, out_names = [], []
    for k in np.argsort(ts, kind="stable"):
        s, e, r = tops.get(int(tid[k]), (np.empty(0), np.empty(0), np.empty(0, np.int64)))
        i = int(np.searchsorted(s, ts[k], "right")) - 1
        inside = i >= 0 and ts[k] <= e[i]
        key = (int(tid[k]), i) if inside else ("solo", int(k))
        if key in seen:
            continue
        seen.add(key)
        top = names[cpu.name_id[r[i]]] if inside else name_l[k]
        out_ts.append(ts[k])
        # ".item()" says it all; other ops name the blocking call inside them.
        out_names.append(top if top == name_l[k] or top in ITEM_OPS else f"{top} ({name_l[k]})")
    return np.asarray(out_ts, dtype=np.float64), out_names, \
        {n: np.asarray(v) for n, v in raw.items()}
