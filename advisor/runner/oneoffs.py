"""What the timed window leaves out: costs that are not the training step's, or that it pays
once and not again.

- An evaluation pass: from ``.eval()`` on the model being trained to its ``.train()`` (as at
  an epoch's end). Its time is taken out of the step it fell in (that step's training work, an
  epoch's start included, stays in), and so are its one-off costs: a compiled model
  recompiles for eval mode and the evaluation's batch shapes, and cudnn.benchmark searches
  algorithms for them (a window holding one pass can average many times the step:
  docs/measurement.md). The GPU is synchronized where the pass begins, so
  the training work queued before it is not taken out with it.
- A whole step, when torch.compile compiled a new graph in it (a recompile on a new shape),
  or when a DataLoader gave it a batch of a size not seen before (an epoch's short last
  batch: cudnn.benchmark searches again, at a cost far above a step's).

A window leaves out at most 2 + a quarter of the steps it counts: a script that recompiles
or meets new batch sizes every step is timed with those costs in, as it runs.
"""

from __future__ import annotations

import functools
import sys
import weakref
from time import perf_counter

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


def graph_breaks(limit: int = 5) -> list[dict]:
    """torch.compile's graph breaks in this process, the most frequent first: [{"reason": its
    first line, "count"}]."""
    if "torch._dynamo" not in sys.modules:
        return []
    try:
        from torch._dynamo.utils import counters

        seen: dict[str, int] = {}
        for reason, n in counters["graph_break"].items():
            first = str(reason).strip().splitlines()[0][:200] if str(reason).strip() else "?"
            seen[first] = seen.get(first, 0) + int(n)
        return [{"reason": r, "count": n} for r, n in sorted(seen.items(), key=lambda kv: -kv[1])[:limit]]
    except Exception:
        return []


# Dynamo's timers of a compile: the forward graphs (tracing and the backend's compile) and the
# backward graphs, which AOTAutograd compiles lazily at the first backward.
_COMPILE_TIMERS = ("_compile.compile_inner", "backward._backward_impl")


def compile_seconds() -> float | None:
    """Seconds torch.compile spent compiling in this process so far (graphs loaded from the
    cache count their load); None when it never ran."""
    if not compiled_graphs():
        return None
    try:
        from torch._dynamo.utils import compilation_time_metrics

        return round(sum(sum(compilation_time_metrics.get(k) or []) for k in _COMPILE_TIMERS), 3)
    except Exception:
        return None


def compile_cache_use() -> dict | None:
    """How this process's compiled graphs came: {"hits", "misses"} of Inductor's FX graph cache
    and AOTAutograd's (a hit is a graph loaded, not compiled); None when it never compiled."""
    if not compiled_graphs():
        return None
    try:
        from torch._dynamo.utils import counters

        fx, aot = counters["inductor"], counters["aot_autograd"]
        return {"hits": int(fx["fxgraph_cache_hit"] + aot["autograd_cache_hit"]),
                "misses": int(fx["fxgraph_cache_miss"] + aot["autograd_cache_miss"])}
    except Exception:
        return None


def _sync() -> None:
    try:
        if torch.cuda.is_initialized():
            torch.cuda.synchronize()
    except Exception:
        pass


class OneOffs:
    """For the step under way: the evaluation time in it, and whether it is a one-off."""

    def __init__(self):
        self.models: weakref.WeakSet = weakref.WeakSet()  # outermost modules a backward followed
        self.timing = False          # the window is open
        self.eval_s = 0.0            # evaluation time in this step
        self._eval_t0: float | None = None
        self._graphs = 0
        self.window_graphs = 0   # graphs torch.compile made inside the timed window: recompiles
        self._why: str | None = None
        self._sizes: set = set()     # batch shapes seen (DataLoader), by trailing dims
        self._trailing = None        # the first batch's shape after its first dim

    # ------------------------------------------------------------------ what the hooks see
    def trained(self, module) -> None:
        """An outermost forward with grad enabled, in a warm-up step: a model being trained."""
        try:
            self.models.add(module)
        except TypeError:  # not weak-referenceable or not hashable: not tracked
            pass

    def batch(self, t) -> None:
        """A DataLoader batch's first tensor: a size not seen before (same trailing dims)
        marks the step, in the window and outside an evaluation."""
        try:
            shape = tuple(t.shape)
        except Exception:
            return
        if not shape:
            return
        if self._trailing is None:
            self._trailing = shape[1:]
        if shape in self._sizes:
            return
        self._sizes.add(shape)
        if self.timing and self._eval_t0 is None and shape[1:] == self._trailing:
            self._why = self._why or "new batch size"

    def evaluating(self) -> bool:
        """An evaluation pass is open (its DataLoader waits are not the training step's)."""
        return self._eval_t0 is not None

    def backward(self) -> None:
        """A backward while a pass is open: the model trains in eval mode (a frozen BatchNorm
        recipe on the whole model), which is no evaluation."""
        self._eval_t0 = None

    def patch_train(self, patcher, commit) -> None:
        """nn.Module.train wrapped: eval() on a trained model opens an evaluation span and its
        train() closes it (a frozen BatchNorm's eval() inside the model is not the model's).
        commit: the controller's pending step boundary first, as at every hooked event (the
        pass after an epoch's last step then falls in the next step, whole)."""
        orig = torch.nn.Module.train
        me = self

        @functools.wraps(orig)
        def train(module, mode=True):
            try:
                ours = module in me.models
            except TypeError:
                ours = False
            if ours and me.timing:
                commit()
                me._switched(bool(mode))
            return orig(module, mode)

        patcher.set(torch.nn.Module, "train", train)

    def _switched(self, training: bool) -> None:
        if not training and self._eval_t0 is None:
            _sync()  # the training work queued before the pass is the step's
            self._eval_t0 = perf_counter()
        elif training and self._eval_t0 is not None:
            _sync()
            self.eval_s += perf_counter() - self._eval_t0
            self._eval_t0 = None
            self._graphs = compiled_graphs()  # what compiled for eval mode is the pass's

    # ------------------------------------------------------------------ the window's side
    def start(self) -> None:
        """The window opens: nothing seen yet (the window's own sync was just made)."""
        self.timing = True
        self.eval_s, self._eval_t0, self._why = 0.0, None, None
        self._graphs = compiled_graphs()

    def stop(self) -> None:
        """The window closed: the profiled steps after it are not synced at .eval()."""
        self.timing = False

    def take(self) -> tuple[str | None, float]:
        """At a step's end: (why the whole step is a one-off, or None; the evaluation seconds
        to take out of it). A pass still open goes on into the next step."""
        why = self._why
        graphs = compiled_graphs()
        if graphs > self._graphs and self.timing:   # recompiled inside the window (ADV123)
            self.window_graphs += graphs - self._graphs
        if why is None and graphs != self._graphs:
            why = "compile"
        if self._eval_t0 is not None:
            now = perf_counter()
            self.eval_s += now - self._eval_t0
            self._eval_t0 = now
        out = (why, self.eval_s)
        self._why, self.eval_s, self._graphs = None, 0.0, graphs
        return out
