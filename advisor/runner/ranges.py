"""Phase ranges: torch ``record_function`` ranges while profiling, NVTX ranges when CUDA is
available (cheap no-ops unless a tool such as Nsight Systems is attached)."""

from __future__ import annotations

import torch

_rf_enter = torch.ops.profiler._record_function_enter_new
_rf_exit = torch.ops.profiler._record_function_exit._RecordFunction

PHASES = ("advisor::data", "advisor::h2d", "advisor::forward", "advisor::backward",
          "advisor::zero_grad", "advisor::optimizer")


class Ranges:
    """push/pop nest (NVTX push/pop); start/end need not nest (NVTX start/end ranges)."""

    def __init__(self) -> None:
        self.profiling = False  # emit record_function ranges (only while advisor's profiler runs)
        self._push = self._pop = self._start = self._end = None

    def enable_nvtx(self) -> str | None:
        """Turn NVTX ranges on; returns the backend used, or None when none works."""
        try:
            import nvtx  # type: ignore

            dom = nvtx.get_domain()
            attrs = {name: dom.get_event_attributes(message=name) for name in PHASES}
            self._push = lambda name: dom.push_range(attrs[name])
            self._pop = dom.pop_range
            self._start = lambda name: dom.start_range(attrs[name])
            self._end = dom.end_range
            return "nvtx"
        except Exception:
            pass
        try:
            tn = torch.cuda.nvtx
            self._push, self._pop = tn.range_push, tn.range_pop
            self._start, self._end = tn.range_start, tn.range_end
            return "torch.cuda.nvtx"
        except Exception:
            self._push = self._pop = self._start = self._end = None
            return None

    def push(self, name: str):
        h = _rf_enter(name, None) if self.profiling else None
        pushed = False
        if self._push is not None:
            try:
                self._push(name)
                pushed = True
            except Exception:
                pass
        return (h, pushed)

    def pop(self, token) -> None:
        h, pushed = token
        if pushed:
            try:
                self._pop()
            except Exception:
                pass
        if h is not None:
            _rf_exit(h)

    def start(self, name: str):
        h = _rf_enter(name, None) if self.profiling else None
        rid = None
        if self._start is not None:
            try:
                rid = self._start(name)
            except Exception:
                rid = None
        return (h, rid)

    def end(self, token) -> None:
        h, rid = token
        if rid is not None:
            try:
                self._end(rid)
            except Exception:
                pass
        if h is not None:
            _rf_exit(h)
