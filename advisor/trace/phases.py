"""Training-phase attribution on a TraceModel (docs/internals.md §3, "Phase attribution").

The CPU timeline is painted with phase ranges from any thread (autograd's backward runs on its
own thread, so the ranges of all threads are merged): an instant gets the phase of the innermost
range covering it (the one that started last). A GPU op gets the phase at the timestamp of the
runtime call that launched it, found through ``correlation``.

Range sources, per phase: ``advisor::<phase>`` user annotations when the trace has any for that
phase; otherwise torch's own annotations:
    data_wait  enumerate(DataLoader)#...
    optimizer  Optimizer.step#...
    zero_grad  Optimizer.zero_grad#...
    backward   per step, first to last autograd::engine::evaluate_function... op
    forward    per step, end of the data phase to the first backward op
    h2d        the cudaMemcpy* runtime calls of host-to-device copies
"""

from __future__ import annotations

import numpy as np

from advisor.trace.model import TraceModel

PHASES = ("data_wait", "h2d", "forward", "backward", "zero_grad", "optimizer", "other", "gpu_idle")
P = {p: i for i, p in enumerate(PHASES)}
OTHER = P["other"]

ADVISOR_RANGES = {"advisor::data": "data_wait", "advisor::h2d": "h2d",
                  "advisor::forward": "forward", "advisor::backward": "backward",
                  "advisor::zero_grad": "zero_grad", "advisor::optimizer": "optimizer"}
TORCH_PREFIX = {"data_wait": "enumerate(DataLoader)#", "optimizer": "Optimizer.step#",
                "zero_grad": "Optimizer.zero_grad#"}
BACKWARD_PREFIX = "autograd::engine::evaluate_function"


class Timeline:
    """Piecewise-constant phase code: segment i is [bounds[i], bounds[i+1]) with code[i]."""

    def __init__(self, bounds: np.ndarray, code: np.ndarray, sources: dict[str, str]):
        self.bounds, self.code, self.sources = bounds, code, sources
        self._by_code: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def at(self, ts: np.ndarray) -> np.ndarray:
        """Phase code at each timestamp (OTHER outside every range)."""
        ts = np.asarray(ts, dtype=np.float64)
        if len(self.bounds) < 2:
            return np.full(len(ts), OTHER, dtype=np.int8)
        i = np.searchsorted(self.bounds, ts, "right") - 1
        inside = (i >= 0) & (i < len(self.code))
        out = np.full(len(ts), OTHER, dtype=np.int8)
        out[inside] = self.code[i[inside]]
        return out

    def segments(self, code: int, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
        """Segments with this phase code clipped to [lo, hi)."""
        if len(self.bounds) < 2:
            return np.empty(0), np.empty(0)
        if code not in self._by_code:  # sorted, disjoint segments of this code, computed once
            sel = np.flatnonzero(self.code == code)
            self._by_code[code] = (self.bounds[sel], self.bounds[sel + 1])
        s, e = self._by_code[code]
        i0, i1 = np.searchsorted(e, lo, "right"), np.searchsorted(s, hi, "left")
        s, e = np.clip(s[i0:i1], lo, hi), np.clip(e[i0:i1], lo, hi)
        keep = e > s
        return s[keep], e[keep]


def _rows(model: TraceModel, pred, cat: int | None = None) -> np.ndarray:
    rows = model.cpu_where(pred)
    return rows[model.cpu.cat[rows] == cat] if cat is not None and len(rows) else rows


def _ranges(model: TraceModel) -> tuple[list, list, list, dict]:
    """(starts, ends, codes, sources) of every phase range before painting."""
    cpu = model.cpu
    S: list[np.ndarray] = []
    E: list[np.ndarray] = []
    C: list[np.ndarray] = []
    sources: dict[str, str] = {}

    def add(s, e, phase):
        s, e = np.asarray(s, dtype=np.float64), np.asarray(e, dtype=np.float64)
        S.append(s); E.append(e); C.append(np.full(len(s), P[phase], dtype=np.int8))

    for rng, phase in ADVISOR_RANGES.items():
        rows = _rows(model, lambda n, r=rng: n == r, cat=1)
        if len(rows):
            add(cpu.ts[rows], cpu.ts[rows] + cpu.dur[rows], phase)
            sources[phase] = "advisor"
    for phase, prefix in TORCH_PREFIX.items():
        if phase not in sources:
            rows = _rows(model, lambda n, p=prefix: n.startswith(p), cat=1)
            if len(rows):
                add(cpu.ts[rows], cpu.ts[rows] + cpu.dur[rows], phase)
                sources[phase] = "torch"
    bwd = _rows(model, lambda n: n.startswith(BACKWARD_PREFIX))
    bwd_s, bwd_e = cpu.ts[bwd], cpu.ts[bwd] + cpu.dur[bwd]
    windows = _iteration_windows(model, S, E, C)
    if "backward" not in sources and len(bwd):
        sources["backward"] = "torch"
        if windows is None:  # no step structure to span over: the ops themselves
            add(bwd_s, bwd_e, "backward")
        else:
            spans = [(bwd_s[m].min(), bwd_e[m].max()) for a, b in windows
                     if (m := (bwd_s >= a) & (bwd_s < b)).any()]
            add([x for x, _ in spans], [y for _, y in spans], "backward")
    if "forward" not in sources and windows is not None:
        _forward_fallback(S, E, C, windows, bwd_s, add)
        sources["forward"] = "torch"
    if "h2d" not in sources:
        s, e = _h2d_calls(model)
        if len(s):
            add(s, e, "h2d")
            sources["h2d"] = "runtime"
    return S, E, C, sources


def _iteration_windows(model: TraceModel, S, E, C) -> list[tuple[float, float]] | None:
    """Windows that each hold one training iteration, for the torch-only fallbacks: from the
    end of one data fetch to the start of the next when data ranges exist (this works even
    when the whole trace is one "step"), else the step windows; None when neither exists."""
    whole = len(model.steps) == 1 and model.steps[0][2] == "trace"
    if S:
        s, e, c = np.concatenate(S), np.concatenate(E), np.concatenate(C)
        ds, de = s[c == P["data_wait"]], e[c == P["data_wait"]]
        if len(ds) and whole:
            order = np.argsort(ds)
            ds, de = ds[order], de[order]
            return list(zip(de, np.append(ds[1:], model.duration)))
    return None if whole else [(a, a + d) for a, d, _ in model.steps]


def _forward_fallback(S, E, C, windows, bwd_s, add) -> None:
    """Forward = end of the data phase (or window start) to the first backward op in the
    window (or the optimizer, or the window end)."""
    if S:
        s, e, c = np.concatenate(S), np.concatenate(E), np.concatenate(C)
    else:
        s = e = c = np.empty(0)
    data_e, opt_s = e[c == P["data_wait"]], s[c == P["optimizer"]]
    fs, fe = [], []
    for a, b in windows:
        d = data_e[(data_e >= a) & (data_e <= b)]
        start = d.max() if len(d) else a
        later = [x[(x > start) & (x < b)] for x in (bwd_s, opt_s)]
        end = min((x.min() for x in later if len(x)), default=b)
        if end > start:
            fs.append(start); fe.append(end)
    add(fs, fe, "forward")


def _h2d_calls(model: TraceModel) -> tuple[np.ndarray, np.ndarray]:
    m, rt = model.memcpy, model.runtime
    if not len(m) or not len(rt):
        return np.empty(0), np.empty(0)
    corr = m.correlation[m.kind == "HtoD"]
    idx = lookup(rt.correlation, corr)
    idx = idx[idx >= 0]
    return rt.ts[idx], rt.ts[idx] + rt.dur[idx]


def lookup(keys: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Row index in ``keys`` of each wanted value, -1 where absent."""
    if not len(keys):
        return np.full(len(wanted), -1, dtype=np.int64)
    order = np.argsort(keys, kind="stable")
    pos = np.searchsorted(keys[order], wanted)
    pos = np.clip(pos, 0, len(keys) - 1)
    hit = keys[order][pos] == wanted
    return np.where(hit, order[pos], -1)


def timeline(model: TraceModel) -> Timeline:
    """Paint phase ranges in start order (outer first) so inner ranges overwrite outer ones."""
    S, E, C, sources = _ranges(model)
    if not S or not sum(len(s) for s in S):
        return Timeline(np.empty(0), np.empty(0, dtype=np.int8), sources)
    s, e, c = np.concatenate(S), np.concatenate(E), np.concatenate(C)
    ok = e > s
    s, e, c = s[ok], e[ok], c[ok]
    bounds = np.unique(np.concatenate([s, e]))
    code = np.full(max(len(bounds) - 1, 0), OTHER, dtype=np.int8)
    si, ei = np.searchsorted(bounds, s), np.searchsorted(bounds, e)
    for j in np.lexsort((-e, s)):  # by start, longer first on ties
        code[si[j]:ei[j]] = c[j]
    return Timeline(bounds, code, sources)


class GpuOps:
    """Kernels, memcpys and memsets as one set of intervals with class and launch phase."""

    def __init__(self, start, end, cls, phase, kind, table_row, launch=None):
        self.start, self.end, self.cls, self.phase = start, end, cls, phase
        self.launch = start if launch is None else launch   # its runtime call's start
        self.kind = kind            # 0 kernel, 1 memcpy, 2 memset
        self.row = table_row        # row in its own table

    def __len__(self) -> int:
        return len(self.start)


def gpu_ops(model: TraceModel, tl: Timeline) -> GpuOps:
    from advisor.trace.classify import CODE
    k, m, z, rt = model.kernels, model.memcpy, model.memset, model.runtime
    start = np.concatenate([k.ts, m.ts, z.ts])
    end = start + np.concatenate([k.dur, m.dur, z.dur])
    corr = np.concatenate([k.correlation, m.correlation, z.correlation])
    cls = np.concatenate([k.cls, np.full(len(m), CODE["memcpy"], np.int8),
                          np.full(len(z), CODE["fill_memset"], np.int8)]).astype(np.int8)
    kind = np.concatenate([np.zeros(len(k), np.int8), np.ones(len(m), np.int8),
                           np.full(len(z), 2, np.int8)])
    row = np.concatenate([np.arange(len(k)), np.arange(len(m)), np.arange(len(z))])
    idx = lookup(rt.correlation, corr)
    # Launch time of each op; an op whose launch is not in the trace uses its own start.
    launch = np.where(idx >= 0, rt.ts[np.maximum(idx, 0)] if len(rt) else 0.0, start)
    phase = tl.at(launch)
    # Elementwise kernels launched by the optimizer are optimizer work (foreach=False SGD runs
    # one add_/mul_ kernel per parameter); done here because only phases know it.
    cls = np.where((cls == CODE["elementwise"]) & (phase == P["optimizer"]), CODE["optimizer"], cls)
    return GpuOps(start, end, cls.astype(np.int8), phase, kind, row, launch)
