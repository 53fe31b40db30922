"""Python's garbage collections inside the timed window: how many, of which generation, and how
long they held the training thread (``gc.callbacks``). A full collection walks every object
the script keeps alive (a model's modules, a dataset's Python lists, a tokenizer's tables); in
the step it falls in, the GPU waits for the host (rules/adv120_gc_pauses.py)."""

from __future__ import annotations

import gc
import threading
from time import perf_counter


class GcClock:
    """Collections while ``on``, on the thread that timed the window (a DataLoader's worker
    threads collect on their own)."""

    def __init__(self):
        self.ms = 0.0
        self.collections = [0, 0, 0]
        self.longest_ms = 0.0
        self.on = False
        self._t0: float | None = None
        self._thread: int | None = None   # the window's thread, set at start
        self._installed = False

    def start(self) -> None:
        if not self._installed:
            gc.callbacks.append(self._callback)
            self._installed = True
        self.ms, self.collections, self.longest_ms = 0.0, [0, 0, 0], 0.0
        self._thread = threading.get_ident()
        self.on = True

    def stop(self) -> None:
        self.on = False

    def _callback(self, phase: str, info: dict) -> None:
        if not self.on or threading.get_ident() != self._thread:
            return
        if phase == "start":
            self._t0 = perf_counter()
        elif phase == "stop" and self._t0 is not None:
            ms = (perf_counter() - self._t0) * 1e3
            self._t0 = None
            self.ms += ms
            self.longest_ms = max(self.longest_ms, ms)
            gen = int(info.get("generation", 0))
            if 0 <= gen < 3:
                self.collections[gen] += 1

    def doc(self) -> dict:
        """child.json's ``gc``: collections by generation, their milliseconds in the window."""
        return {"ms": round(self.ms, 4), "collections": list(self.collections), "longest_ms": round(self.longest_ms, 4),
                "gen0_threshold": gc.get_threshold()[0], "frozen": gc.get_freeze_count()}
