"""The timed window: consecutive unprofiled steps, synchronized at its two ends only.

A sync after every step would stop the CPU from queueing the next step while the GPU works,
and so would time a different (serialized) program. The per-step times are host-side step
boundaries; they tile the window, whose end waits for the GPU. The window lasts at least
``min_s`` seconds, up to CAP times the steps asked (fewer steps once their mean is known to
PRECISION), and spans whole epochs when the training DataLoader's epoch is at most ALIGN
times the steps asked: any k*L consecutive steps hold exactly k epoch starts, where the
loader's workers make a fresh first batch (many steps' time each: a window holding one more
of them reads slower, docs/measurement.md).
"""

from __future__ import annotations

from time import perf_counter

import torch

from advisor.runner._util import MIN_TIMED
from advisor.runner.gctime import GcClock

# How far a window may grow past the steps asked to reach min_s. Short steps need many of
# them: one host hiccup moves a short window of short steps by several %. A larger cap
# lets short steps fill min_s, but a short script then ends inside its window, and its
# batch-size trials (half the steps) too, so neither is profiled (docs/measurement.md).
# Until the window knows how long the script runs, the profile comes first.
CAP = 10
# Whole epochs only when one is at most this many times the steps asked, so the window
# grows by less than an epoch: a one-epoch script (the CPU quick start: 40 steps) cannot
# hold a window of a whole epoch after its warm-up, and would end before being profiled.
ALIGN = 1
# A window of long steps closes before the steps asked once its mean step is known well: the
# standard error of the mean, from the spread of BLOCKS consecutive blocks' means, at most
# PRECISION of it (a third of the 3% least gain a trial is accepted on), on MIN_KEPT steps at
# least and never before min_s (a min_s of 0 asks for the steps alone): long steps then need
# fewer than the steps asked (docs/measurement.md).
PRECISION = 0.01
BLOCKS = 4
MIN_KEPT = 8
# A window of steps so long that the steps asked would spend the analyze's budget alone (a CPU
# step of 10 s on a loaded host: 20 steps, 200 s of a 240 s budget) closes once it has lasted
# max_s (specs: a share of the budget) and holds BY_TIME_MIN steps: an answer on fewer, steadier
# figures, and the budget left for what comes after. Never before min_s.
BY_TIME_MIN = 5


class Window:
    def __init__(self, steps: int, min_s: float, one_offs=None, max_s: float | None = None):
        self.steps = max(0, int(steps))
        self.min_s = max(0.0, float(min_s))
        self.max_s = max(float(max_s), self.min_s) if max_s else None
        self.cap = CAP * self.steps
        self.batches_per_epoch: int | None = None  # len() of the training loop's DataLoader
        self.step_times_ms: list[float] = []
        self.data_wait_ms: list[float] = []
        self.tokens: list[list[int] | None] = []   # each step's [real, all] tokens (runner/tokens.py)
        self.window_ms: float | None = None
        self.sync = False
        self._t0 = self._t_prev = 0.0
        self.one_offs = one_offs  # runner/oneoffs.OneOffs: why a step is a one-off
        self.left_out: dict[str, int] = {}  # steps left out, by why
        self.left_out_ms = 0.0
        self.gc = GcClock()   # Python's collections in the window (runner/gctime.py)
        self.closed_by: str | None = None   # "steps", "min_time", "cap", "epochs", "precise", "budget"

    def start(self) -> None:
        try:
            self.sync = bool(torch.cuda.is_initialized())
        except Exception:
            self.sync = False
        if self.sync:
            torch.cuda.synchronize()
        if self.one_offs is not None:
            self.one_offs.start()
        self.gc.start()
        self._t_prev = self._t0 = perf_counter()

    def step(self, data_wait_s: float, tokens: list[int] | None = None) -> bool:
        """A step ended; True when it closes the window. An evaluation pass's time is taken
        out of the step it fell in, and a step with a one-off cost is left out while the window
        has left out at most 2 + a quarter of the steps it counts (runner/oneoffs.py)."""
        t = perf_counter()
        one_off, eval_s = self.one_offs.take() if self.one_offs is not None else (None, 0.0)
        if one_off and self._whole_steps_left_out() < 2 + len(self.step_times_ms) // 4:
            self.left_out[one_off] = self.left_out.get(one_off, 0) + 1
            self.left_out_ms += (t - self._t_prev) * 1e3
            self._t_prev = t
            return False
        if eval_s > 0:  # an evaluation pass: its time out of this step, the step kept
            self.left_out["evaluation"] = self.left_out.get("evaluation", 0) + 1
            self.left_out_ms += eval_s * 1e3
            self._t_prev += eval_s
        last = self.complete(len(self.step_times_ms) + 1, t - self._t0 - self.left_out_ms / 1e3,
                             [*self.step_times_ms, (t - self._t_prev) * 1e3])
        if last and self.sync:
            torch.cuda.synchronize()
            t = perf_counter()
        self.step_times_ms.append((t - self._t_prev) * 1e3)
        self.data_wait_ms.append(data_wait_s * 1e3)
        self.tokens.append(tokens)
        self._t_prev = t
        if last:
            self.window_ms = (t - self._t0) * 1e3 - self.left_out_ms
            self.gc.stop()
            if self.one_offs is not None:
                self.one_offs.stop()
        return last

    def _whole_steps_left_out(self) -> int:
        return sum(n for why, n in self.left_out.items() if why != "evaluation")

    def close_early(self) -> bool:
        """The script ended inside the window: keep it when it holds MIN_TIMED steps (a short
        script's answer rests on them; advisor.schedule times it again when fewer). The
        steps' host-side times tile it up to the last step boundary (what ran after the
        loop, an evaluation or a save, is not the training step's)."""
        if self.window_ms is not None or len(self.step_times_ms) < max(1, min(self.steps, MIN_TIMED)):
            return False
        if self.sync:
            torch.cuda.synchronize()
        self.window_ms = sum(self.step_times_ms)
        self.gc.stop()
        return True

    def complete(self, k: int, elapsed: float, times_ms: list[float] | None = None) -> bool:
        """Is a window of k steps, elapsed seconds long (times_ms: its steps so far), complete?
        Why it closed is kept in closed_by."""
        self.closed_by = self._why_complete(k, elapsed, times_ms or [])
        return self.closed_by is not None

    def _why_complete(self, k: int, elapsed: float, times_ms: list[float]) -> str | None:
        if self.max_s is not None and BY_TIME_MIN <= k < self.steps and elapsed >= self.max_s:
            return "budget"
        per_epoch = self.batches_per_epoch
        if per_epoch and per_epoch <= ALIGN * self.steps:
            if k < self.steps or k % per_epoch:
                return None
            return "epochs" if elapsed >= self.min_s or k + per_epoch > max(self.cap, 2 * per_epoch) else None
        if k >= self.steps:
            if elapsed >= self.min_s:
                return "steps" if k == self.steps else "min_time"
            return "cap" if k >= self.cap else None
        if k >= MIN_KEPT and 0 < self.min_s <= elapsed and known(times_ms[-k:]):   # min_s 0: the steps alone
            return "precise"
        return None

def known(times_ms: list[float]) -> bool:
    """The mean of these consecutive step times is known to PRECISION: BLOCKS blocks' means
    spread little (blocks, not steps: a step's time leans on its neighbours' through the
    queue the host fills ahead of the GPU)."""
    size = len(times_ms) // BLOCKS
    if size < 1:
        return False
    means = [sum(times_ms[i * size:(i + 1) * size]) / size for i in range(BLOCKS)]
    mean = sum(means) / BLOCKS
    if mean <= 0:
        return False
    var = sum((m - mean) ** 2 for m in means) / (BLOCKS - 1)
    return (var / BLOCKS) ** 0.5 <= PRECISION * mean


def settle_steps() -> int:
    """Untimed steps before the window when torch.compile has compiled anything in this
    process: one, in which CUDA graph trees may still be recording (the runner's hooks stay
    in place for a compiled model, so nothing recompiles; see Controller._enter_measure)."""
    try:
        from torch._dynamo.utils import counters

        return 1 if counters["stats"]["unique_graphs"] else 0
    except Exception:
        return 0
