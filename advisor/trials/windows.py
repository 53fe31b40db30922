"""One timed window at a time, for trial processes side by side (advisor.trials.gpus).

Processes on GPUs of their own still share the host: its cores, memory bandwidth and page
cache. A loader-bound step timed while other processes build their datasets, compile or run
DataLoader workers reads their load, not the fix: the run-to-run noise, and with it the
acceptance threshold, rises, and a fix's verdict changes from one analyze to the next
(docs/trials.md, "One timed window at a time", has the figures). So while a process times its
steps (from "measuring" until its profile is written), every other process of the trials is
stopped (SIGSTOP, its whole group: the DataLoader workers too) and continued once no window is
open. A short script's profile, run in a process of its
own, is a window too (from its profiler's start). A process stopped this way is continued
before it is stopped for good (the ladder no longer expects it, or Ctrl-C).

The work each stopped process had queued on its own GPU goes on; its host work waits. A
process's window is its own few seconds at its end: what the others lose is the sum of those.
"""

from __future__ import annotations

import signal
import threading

from advisor.runner.follow import kill_group

# A window opens when the process starts timing its steps, or starts its profiler (a short
# script's profile runs in a process of its own, with no timed steps: advisor.schedule).
OPENS = ("measuring", "profiler-started")
CLOSES = ("exporting", "measured", "done")


class Windows:
    """The processes running side by side, each known by its run's signals object (run_child
    sets its ``pgid``), and which of them time their steps now."""

    def __init__(self):
        self.lock = threading.Lock()
        self.running: list = []        # signals objects of the processes running
        self.timing: list = []         # ... in their window now
        self.stopped: list = []        # ... stopped for another's window
        self.stops = 0                 # how many times a process was stopped (trial_summary.gpus)

    def watch(self, signals):
        """The on_progress stage callback for the process that runs with ``signals``."""
        with self.lock:
            self.running.append(signals)

        def on_stage(stage: str, step: int = 0, info: dict | None = None) -> None:
            if stage in OPENS:
                self._open(signals)
            elif stage in CLOSES:
                self._close(signals)
            elif self.timing and signals not in self.timing:
                self._stop([signals])   # it started while a window is open
        return on_stage

    def forget(self, signals) -> None:
        """The process ended, or is about to be stopped for good: continued if stopped, its
        window closed."""
        self._close(signals)
        with self.lock:
            if signals in self.running:
                self.running.remove(signals)
            if signals in self.stopped:
                self.stopped.remove(signals)
                _signal(signals, signal.SIGCONT)

    def _open(self, signals) -> None:
        with self.lock:
            if signals not in self.timing:
                self.timing.append(signals)
            if signals in self.stopped:
                # it said so before it was stopped (its record is read after): its window is
                # under way, and a stop inside it would be timed
                self.stopped.remove(signals)
                _signal(signals, signal.SIGCONT)
        self._stop(list(self.running))

    def _close(self, signals) -> None:
        with self.lock:
            if signals in self.timing:
                self.timing.remove(signals)
            if self.timing:
                return
            for s in self.stopped:
                _signal(s, signal.SIGCONT)
            self.stopped = []

    def _stop(self, targets: list) -> None:
        with self.lock:
            if not self.timing:
                return
            for s in targets:
                if s not in self.stopped and s not in self.timing and s in self.running and getattr(s, "pgid", None):
                    _signal(s, signal.SIGSTOP)
                    self.stopped.append(s)
                    self.stops += 1


def _signal(signals, sig: int) -> None:
    pgid = getattr(signals, "pgid", None)
    if pgid:
        kill_group(pgid, sig)
