"""Steps the timed window leaves out: those that hold a one-off cost that the training steps
around them do not pay again.

- An evaluation pass (the script called ``.eval()`` on the model it trains, as at an epoch's
  end). Its time is not a training step's, and the first one pays one-off costs of its own:
  a compiled model recompiles for eval mode and the batch shapes of the evaluation (mnist's
  CNN on an H100: a 112-step window of 2.5 ms steps averaged 42-62 ms with it), and
  cudnn.benchmark searches algorithms for those shapes again (10 ms against 2.5).
- A step in which torch.compile compiled a new graph (a recompile on a new shape, such as an
  epoch's short last batch).

A window leaves out at most 2 + a quarter of the steps it counts: a script that evaluates
or recompiles every step is timed with those costs in, as it runs.
"""

from __future__ import annotations

import functools
import sys
import weakref

import torch


def compiled_graphs() -> int:
    """Graphs torch.compile has compiled in this process so far (0 when it never ran)."""
    if "torch._dynamo" not in sys.modules:
        return 0
    try:
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])
    except Exception:
        return 0


class OneOffs:
    """Tracks, for the step under way, whether it evaluated the trained model or compiled."""

    def __init__(self):
        self.models: weakref.WeakSet = weakref.WeakSet()  # outermost modules a backward followed
        self.evaluated = False
        self._graphs = 0

    def trained(self, module) -> None:
        """An outermost forward with grad enabled, in a warm-up step: a model being trained."""
        try:
            self.models.add(module)
        except TypeError:  # not weak-referenceable or not hashable: not tracked
            pass

    def patch_train(self, patcher) -> None:
        """nn.Module.train wrapped: eval() on a trained model marks the step (a frozen
        BatchNorm's eval() inside the model does not: it is not the model itself)."""
        orig = torch.nn.Module.train
        me = self

        @functools.wraps(orig)
        def train(module, mode=True):
            if not mode:
                try:
                    if module in me.models:
                        me.evaluated = True
                except TypeError:
                    pass
            return orig(module, mode)

        patcher.set(torch.nn.Module, "train", train)

    def start(self) -> None:
        """The window opens: nothing seen yet."""
        self.evaluated = False
        self._graphs = compiled_graphs()

    def take(self) -> str | None:
        """At a step's end: why it is a one-off ("evaluation", "compile") or None; reset."""
        why = "evaluation" if self.evaluated else None
        graphs = compiled_graphs()
        if why is None and graphs != self._graphs:
            why = "compile"
        self.evaluated, self._graphs = False, graphs
        return why
