"""FLOPs of one training step, for the roofline (advisor.roofline): torch's FlopCounterMode over
one warm-up step of the baseline, forward, backward and optimizer alike.

FlopCounterMode counts the matrix products and convolutions (what Tensor Cores run, what MFU
is about) from the shapes each op is dispatched with, in Python, so the counted step runs
slower: it is a warm-up step, never a timed or profiled one. The profiler's ``with_flops``
puts no FLOPs in a Kineto trace (torch 2.11), so it cannot serve. A model compiled by then
is not counted (a dispatch mode would change what torch.compile runs); FLOPs per sample do
not depend on the fixes (AMP, compile, workers change how fast, not how much), so trials
take the baseline's.
"""

from __future__ import annotations

COUNTED_STEP = 3  # lazy initialisation and the first batch are behind it


class _Untracked:
    """FlopCounterMode's module tracker, left out: advisor wants the step's total alone, and the
    tracker's hooks on module outputs' gradients break a script's ``autograd.grad`` on them (a
    WGAN-GP gradient penalty: "A leaf node was passed to _will_engine_execute_node")."""

    parents = ("Global",)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


def _counter():
    """torch's FlopCounterMode counting the whole step, with no module tracking."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    if hasattr(counter, "mod_tracker"):
        counter.mod_tracker = _Untracked()
    return counter


class StepFlops:
    def __init__(self, ctl):
        self.ctl = ctl
        self.counter = None
        self.flops: int | None = None
        self.why: str | None = None
        self.step: int | None = None

    def at_boundary(self, n: int, warmup: int) -> None:
        """Step n ended (a warm-up step): count the next one while it is a warm-up step too."""
        if self.counter is not None:
            self._stop()
        elif n == COUNTED_STEP - 1 and self.flops is None and self.why is None:
            if n + 1 >= warmup:
                self.why = f"FLOPs are counted on warm-up step {COUNTED_STEP}; this run warms up for {warmup}"
            else:
                self._start(n + 1)

    def _start(self, step: int) -> None:
        from advisor.runner.window import settle_steps

        if settle_steps():
            self.why = "the model is compiled (torch.compile): FLOPs are counted on eager steps"
            return
        try:
            counter = _counter()
            counter.__enter__()
            self.counter, self.step = counter, step
        except Exception as e:  # noqa: BLE001 - no FLOPs, never a broken step
            self.why = f"FlopCounterMode failed: {type(e).__name__}: {e}"

    def _stop(self) -> None:
        counter, self.counter = self.counter, None
        try:
            counter.__exit__(None, None, None)
            self.flops = int(counter.get_total_flops())
        except Exception as e:  # noqa: BLE001
            self.why = f"FlopCounterMode failed: {type(e).__name__}: {e}"

    def finish(self) -> None:
        """The script ended while a step was being counted: that step is not whole."""
        if self.counter is not None:
            counter, self.counter = self.counter, None
            try:
                counter.__exit__(None, None, None)
            except Exception:  # noqa: BLE001
                pass
            self.why = "the script ended inside the counted step"

    def doc(self) -> dict:
        return {"per_step": self.flops, "step": self.step, "why_not": self.why}
