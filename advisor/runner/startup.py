"""Where a process's first seconds go, child side: the wall-clock milestones of its start-up, the
waits that are not its own work, and each untimed step.

A trial's one-off cost is its lead-in less the baseline's (measure.lead_in_s, measure.one_off_s),
so the lead-in must be the same quantity in every process, however it was started: cold, from a
spare with torch imported before its spec came (runner.ahead.WarmChild), or on a guess, held at
its first CUDA use or before its last warm-up steps (runner.held). Its wall time holds three
things that are not the script's work and differ between those processes: the holds (a process
waits there for its turn), the stops (advisor stops a process started ahead, or one beside
another's timed window, with SIGSTOP: the parent notes them, runner.follow.stops_of), and the
time its main thread was ready to run but waited for a core (a process started ahead runs niced
beside the trial being timed, and the spare or guess started beside a trial takes cores from
it). The first two are noted as intervals of wall time; the third, where the kernel keeps it
(``/proc/self/schedstat``: the main thread's run-queue delay), as the total at each milestone
and at the end of each untimed step, so measure.lead_in_s can take all three out in every
process alike.
"""

from __future__ import annotations

import time
from time import perf_counter

from advisor.runtime.schedstat import cpu_wait_s


# The main thread's scheduler statistics: time on a CPU, time waiting on a run queue (ns), and
# time slices. /proc/self is the thread group's leader: the script's main thread.
class StartupTimeline:
    """Wall-clock times (time.time()) of the start-up's milestones: install, script, cuda_init,
    cuda_ready, first_step (held, advanced, released for a process started ahead; the parent
    adds spawned and the stops); the hold waits as [start, end]; the main thread's run-queue
    delay at each milestone and at each untimed step's end; and the wall time of each untimed
    step, warm-up or settle, a hold's wait left out, for the warm-up cost
    (measure.warmup_cost_s). Nothing here is synchronized with the GPU."""

    def __init__(self):
        self.milestones: dict[str, float] = {"install": time.time()}
        self.cpu_wait: dict[str, float] = {}
        self.holds: list[list[float]] = []
        self.untimed_ms: list[float] = []
        self.untimed_end: list[float] = []        # wall time at each untimed step's end
        self.untimed_cpu_wait: list[float] = []   # ... the main thread's run-queue delay then
        self._since = perf_counter()  # the end of the last untimed step
        self._note_wait("install")

    def _note_wait(self, milestone: str) -> None:
        w = cpu_wait_s()
        if w is not None:
            self.cpu_wait[milestone] = w

    def mark(self, milestone: str) -> None:
        self.milestones[milestone] = time.time()
        self._note_wait(milestone)

    def restart(self) -> None:
        """Untimed steps are counted from here (the script starts; the window is about to open)."""
        self._since = perf_counter()

    def leave_out(self, seconds: float) -> None:
        """A wait that is not part of the step under way."""
        self._since += seconds

    def hold(self, started: float, ended: float, began: float) -> None:
        """A hold's wait, from ``started`` to ``ended`` (wall time) and ``began`` its perf_counter
        start: out of the lead-in and out of the step under way (runner/held.py)."""
        self.holds.append([round(started, 3), round(ended, 3)])
        self.leave_out(perf_counter() - began)

    def untimed_step(self) -> None:
        t = perf_counter()
        self.untimed_ms.append((t - self._since) * 1e3)
        self._since = t
        self.untimed_end.append(round(time.time(), 4))
        w = cpu_wait_s()
        if w is not None:
            self.untimed_cpu_wait.append(round(w, 4))

    def doc(self) -> dict:
        out: dict = {k: round(v, 3) for k, v in self.milestones.items()}
        if self.holds:
            out["holds"] = [list(h) for h in self.holds]
        if self.cpu_wait:
            out["cpu_wait"] = {k: round(v, 4) for k, v in self.cpu_wait.items()}
        return out

    def steps_doc(self) -> dict:
        """The untimed steps' times and, beside them (advisor.schedule's timing run replaces
        them together), the wall time at each one's end and its main thread's run-queue delay
        then (measure.warmup_cost_s)."""
        waits = self.untimed_cpu_wait if len(self.untimed_cpu_wait) == len(self.untimed_end) else []
        return {"warmup_step_times_ms": [round(x, 4) for x in self.untimed_ms],
                "warmup_step_ends": list(self.untimed_end), "warmup_step_cpu_wait": list(waits)}
