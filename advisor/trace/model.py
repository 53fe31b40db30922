"""The columnar trace model (docs/internals.md §2) and step detection.

Every table is a set of equal-length numpy columns sorted by ``ts``; times are microseconds
relative to the earliest event, so float64 keeps sub-nanosecond resolution. Names are interned
once: a predicate over names is evaluated per *distinct* name (``name_mask``) and then applied
to whole columns by indexing, which is what keeps analysis of multi-GB traces fast.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable

import numpy as np

from advisor.trace.classify import CLASSES, classify_code
from advisor.trace.load import CPU_CATS, Sink, memcpy_kind

_DTYPES = {"q": np.int64, "d": np.float64, "b": np.int8}
_PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")


class Table:
    """Equal-length numpy columns as attributes; ``columns`` lists their names."""

    def __init__(self, **cols: np.ndarray):
        self.columns = list(cols)
        for k, v in cols.items():
            setattr(self, k, v)

    def __len__(self) -> int:
        return len(getattr(self, self.columns[0])) if self.columns else 0

    def take(self, idx) -> Table:
        return Table(**{c: getattr(self, c)[idx] for c in self.columns})

    def __repr__(self) -> str:
        return f"Table({len(self)} rows: {', '.join(self.columns)})"


def _to_table(cols) -> Table:
    out = {}
    for name, code in cols.spec.items():
        a = getattr(cols, name)
        out[name] = np.frombuffer(a, dtype=_DTYPES[code]).copy() if len(a) else \
            np.empty(0, dtype=_DTYPES[code])
    return Table(**out)


class TraceModel:
    """One parsed trace. See docs/internals.md §2 for the fields."""

    CPU_CATS = CPU_CATS            # cpu.cat codes: 0 cpu_op, 1 user_annotation, 2 python_function
    CLASSES = CLASSES    # kernels.cls codes

    def __init__(self, meta: dict, names: list[str], tables: dict[str, Table]):
        self.meta = meta
        self.names = names
        self.cpu: Table = tables["cpu"]
        self.runtime: Table = tables["runtime"]
        self.kernels: Table = tables["kernels"]
        self.memcpy: Table = tables["memcpy"]
        self.memset: Table = tables["memset"]
        self.gpu_annotations: Table = tables["gpu_annotations"]
        self.memory: Table = tables["memory"]
        self.steps: list[tuple[float, float, str]] = []

    # --- names -------------------------------------------------------------------------
    def name(self, name_id: int) -> str:
        return self.names[int(name_id)]

    def name_mask(self, pred: Callable[[str], bool]) -> np.ndarray:
        """Boolean array over the names table; index it with a name_id column."""
        return np.fromiter((bool(pred(n)) for n in self.names), dtype=bool, count=len(self.names))

    def name_ids(self, pred: Callable[[str], bool]) -> np.ndarray:
        return np.flatnonzero(self.name_mask(pred))

    def cpu_where(self, pred: Callable[[str], bool]) -> np.ndarray:
        """Indices of cpu rows whose name satisfies pred."""
        if not len(self.cpu):
            return np.empty(0, dtype=np.int64)
        return np.flatnonzero(self.name_mask(pred)[self.cpu.name_id])

    # --- extent ------------------------------------------------------------------------
    @property
    def has_gpu(self) -> bool:
        """True when the trace holds GPU activity (kernels, copies or memsets)."""
        return bool(len(self.kernels) or len(self.memcpy) or len(self.memset))

    @property
    def duration(self) -> float:
        ends = [float(np.max(t.ts + t.dur)) for t in
                (self.cpu, self.runtime, self.kernels, self.memcpy, self.memset) if len(t)]
        return max(ends, default=0.0)

    def kernel_class(self) -> np.ndarray:
        """Class names per kernel row (object array); ``kernels.cls`` holds the codes."""
        return np.asarray(self.CLASSES, dtype=object)[self.kernels.cls]

    def __repr__(self) -> str:
        return (f"TraceModel({self.meta.get('trace_path')}: {len(self.cpu)} cpu, "
                f"{len(self.runtime)} runtime, {len(self.kernels)} kernels, "
                f"{len(self.memcpy)} memcpy, {len(self.steps)} steps)")


# --- construction ---------------------------------------------------------------------

# The trace's own metadata is untrusted input: these fields keep their Kineto types or are dropped.
_PROPERTY_TYPES = {"id": int, "name": str, "totalGlobalMem": int, "computeMajor": int, "computeMinor": int,
                   "numSms": int}
_INFO_TYPES = {"rank": int, "world_size": int, "backend": str}
_INT64 = 1 << 63


def _scalar(v):
    """A JSON scalar that survives the analysis and orjson (finite, 64-bit, not a bool); else None."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v if -_INT64 <= v < _INT64 else None
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    return v if isinstance(v, str) else None


def _typed(raw, types: dict) -> dict | None:
    """An object's scalar fields, the named ones only when of their type; None when not an object."""
    if not isinstance(raw, dict):
        return None
    out = {}
    for k, v in raw.items():
        v = _scalar(v)
        if v is not None and isinstance(v, types.get(k, object)):
            out[str(k)] = v
    return out


def _meta(raw: dict, path: str, t0: float) -> dict:
    props = raw.get("deviceProperties")
    base = _scalar(raw.get("baseTimeNanoseconds"))
    return {
        "device_properties": [p for p in (_typed(x, _PROPERTY_TYPES) for x in props) if p is not None]
        if isinstance(props, list) else [],
        "cuda_runtime_version": _scalar(raw.get("cuda_runtime_version")),
        "cuda_driver_version": _scalar(raw.get("cuda_driver_version")),
        "distributed_info": _typed(raw.get("distributedInfo"), _INFO_TYPES),
        "base_time_ns": base if isinstance(base, int) else None,
        "trace_path": path,
        "t0_us": t0,  # absolute Kineto ts of relative time 0
    }


def _finite_rows(t: Table) -> Table:
    """Rows whose times are finite numbers (the stdlib parser lets NaN and Infinity through)."""
    ok = np.isfinite(t.ts)
    if "dur" in t.columns:
        ok &= np.isfinite(t.dur)
    return t if ok.all() else t.take(ok)


def build_model(sink: Sink, raw_meta: dict, path: str) -> TraceModel:
    tables = {name: _finite_rows(_to_table(cols)) for name, cols in sink.cols.items()}
    sink.cols.clear()
    starts = [float(t.ts.min()) for t in tables.values() if len(t)]
    t0 = min(starts, default=0.0)
    for t in tables.values():
        if len(t):
            order = np.argsort(t.ts, kind="stable")
            for c in t.columns:
                setattr(t, c, getattr(t, c)[order])
            t.ts -= t0
    names = sink.names
    _add_memcpy_kinds(tables["memcpy"], names)
    k = tables["kernels"]
    codes = np.fromiter((classify_code(n) for n in names), dtype=np.int8,
                        count=len(names))
    k.cls = codes[k.name_id] if len(k) else np.empty(0, dtype=np.int8)
    k.columns.append("cls")
    model = TraceModel(_meta(raw_meta, path, t0), names, tables)
    model.steps = detect_steps(model)
    return model


def _add_memcpy_kinds(m: Table, names: list[str]) -> None:
    kinds = {i: memcpy_kind(names[i]) for i in set(m.name_id.tolist())}
    for j, col in enumerate(("kind", "src", "dst")):
        setattr(m, col, np.array([kinds[i][j] for i in m.name_id.tolist()], dtype="<U12")
                if len(m) else np.empty(0, dtype="<U12"))
        m.columns.append(col)


# --- steps ----------------------------------------------------------------------------

def _optimizer_mask(model: TraceModel) -> np.ndarray:
    return model.name_mask(lambda n: n.startswith("Optimizer.step#") or n == "advisor::optimizer")


def _contains(outer_ts, outer_end, ts: np.ndarray) -> np.ndarray:
    """For each outer interval: does any of the sorted timestamps ts fall inside it?"""
    lo = np.searchsorted(ts, outer_ts, "left")
    hi = np.searchsorted(ts, outer_end, "right")
    return hi > lo


def detect_steps(model: TraceModel) -> list[tuple[float, float, str]]:
    """ProfilerStep#N ranges; else intervals between consecutive Optimizer.step ends; else the
    whole trace. Steps cut off at the trace edges are dropped when complete ones exist."""
    cpu = model.cpu
    # user_annotation in torch 2.x; older Kineto wrote ProfilerStep#N as a cpu_op.
    prof = model.cpu_where(lambda n: bool(_PROFILER_STEP.match(n)))
    if len(prof):
        return _trim_profiler_steps(model, prof)
    opt = np.flatnonzero(_optimizer_mask(model)[cpu.name_id]) if len(cpu) else []
    if len(opt):
        # Prefer torch's own Optimizer.step; advisor::optimizer only when it is alone.
        torch_opt = [i for i in opt if model.names[cpu.name_id[i]].startswith("Optimizer.")]
        opt = np.asarray(torch_opt or opt)
        ends = np.unique(cpu.ts[opt] + cpu.dur[opt])
        if len(ends) >= 2:
            return [(float(a), float(b - a), f"opt#{i + 1}")
                    for i, (a, b) in enumerate(zip(ends[:-1], ends[1:]))]
        return [(0.0, float(ends[0]), "opt#0(partial)")]
    return [(0.0, model.duration, "trace")]


def _trim_profiler_steps(model: TraceModel, prof: np.ndarray) -> list[tuple[float, float, str]]:
    cpu = model.cpu
    steps = sorted((float(cpu.ts[i]), float(cpu.dur[i]), model.names[cpu.name_id[i]]) for i in prof)
    opt = np.flatnonzero(_optimizer_mask(model)[cpu.name_id])
    if len(opt) and len(steps) > 1:
        opt_ts = np.sort(cpu.ts[opt])
        has_opt = _contains(np.array([s[0] for s in steps]),
                            np.array([s[0] + s[1] for s in steps]), opt_ts)
        # A step at either edge with no optimizer step while others have one was cut off by
        # the profiler window (started mid-step, or stopped before the step finished).
        lo, hi = 0, len(steps)
        while lo < hi - 1 and not has_opt[lo] and has_opt[lo + 1:hi].any():
            lo += 1
        while hi - 1 > lo and not has_opt[hi - 1] and has_opt[lo:hi - 1].any():
            hi -= 1
        steps = steps[lo:hi]
    return steps


def steps_from(items: Iterable[tuple[float, float, str]]) -> np.ndarray:
    """(n, 2) array of [start, end) for a steps list."""
    arr = np.array([(s, s + d) for s, d, _ in items], dtype=np.float64)
    return arr.reshape(-1, 2)
