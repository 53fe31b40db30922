"""Steps without an optimizer: what every training loop does is a backward pass followed by an
update of the parameters it produced gradients for. Where no torch.optim optimizer steps (a
hand-written update, ``p.data.add_(p.grad, alpha=-lr)`` or ``p -= lr * p.grad`` under no_grad,
an optimizer class of the script's own), a step ends when those parameters have changed since
the last backward, as seen at the next backward, outermost forward or DataLoader batch (or at
the script's end). Several backward passes before one update (gradient accumulation) are one
step; a loop with no backward (evaluation) has none.

It never counts beside a torch.optim optimizer: the runner switches it off for the run when
one is constructed, or steps (its pre-hook runs before it changes anything), and at the first
``advisor.step()``. A script that constructs one steps by it, and counting both would count
anything else that moves the parameters between a backward and the first step (SAM's
perturbation, FSDP's unsharding) as steps too.

A change is seen without reading a value (no sync with the GPU): an in-place update bumps a
parameter's version counter (``p -= ...``, ``p.add_``, ``torch._foreach_add_``) and
``p.data = ...`` moves its data pointer. ``p.data.add_(...)`` does neither: ``.data`` is an
alias with a version counter of its own, so until a step has been seen through the parameters'
own counters, ``Tensor.data`` is wrapped to keep the watched parameters' latest aliases, and
stays wrapped only where the script's updates go through them. A fixed few parameters, spread
over the graph's leaves, are watched, so a check costs the same for any model."""

from __future__ import annotations

import weakref

import torch

SAMPLE = 16             # parameters watched
WALK_LIMIT = 200_000    # autograd nodes read to find the leaves (once, not every step)
_DATA = torch._C.TensorBase.data   # torch.Tensor has no ``data`` of its own: this is the C getset


def graph_leaves(roots) -> list:
    """The tensors the backward of ``roots`` accumulates gradients into, each once."""
    stack = [getattr(t, "grad_fn", None) for t in roots if isinstance(t, torch.Tensor)]
    seen: set = set()
    out: dict[int, torch.Tensor] = {}
    while stack and len(seen) < WALK_LIMIT:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        var = getattr(fn, "variable", None)   # AccumulateGrad: the leaf it writes .grad to
        if isinstance(var, torch.Tensor):
            out.setdefault(id(var), var)
            continue
        stack.extend(n for n, _ in fn.next_functions)
    return list(out.values())


def spread(items: list, n: int) -> list:
    """n items spread evenly over ``items``, the first and the last among them."""
    if len(items) <= n:
        return list(items)
    step = (len(items) - 1) / (n - 1)
    return [items[round(i * step)] for i in range(n)]


class ParameterUpdates:
    """The watched parameters and what they were when the last backward ended.
    ``patcher_factory`` makes the Patcher that holds the ``Tensor.data`` wrapper; ``on_error``
    hears of a failure, after which this counts nothing (the script goes on)."""

    def __init__(self, patcher_factory, on_error):
        self._on_error = on_error
        self.on = True           # may count steps: no torch.optim optimizer, no advisor.step()
        self.armed = False       # a backward ended since the last step: an update ends a step
        self._new_patcher = patcher_factory
        self._patcher = None     # set while Tensor.data is wrapped
        self._leaves: list = []  # weakrefs to the watched parameters
        self._aliases: dict[int, list] = {}   # id(parameter) -> [its latest .data alias, its version then]
        self._snap: list = []    # per watched parameter: (version, data pointer) after the backward
        self._data_set = False   # ``p.data = ...`` on a watched parameter since the backward
        self._through_data = True   # no step seen through the parameters' own counters yet

    def off(self) -> None:
        """For the rest of the run: an optimizer or advisor.step() counts the steps."""
        self.on = self.armed = False
        self._unwrap_data()
        self._leaves, self._snap = [], []
        self._aliases.clear()

    def _failed(self, e: Exception) -> None:
        self.off()
        self._on_error(e)

    # ------------------------------------------------------------------ backward
    def before_backward(self, roots) -> None:
        """Find the parameters to watch in the graph (while none watched is alive)."""
        if self.on and not any(r() is not None for r in self._leaves):
            try:
                leaves = spread(graph_leaves(roots), SAMPLE)
                self._leaves = [weakref.ref(t) for t in leaves]
                self._aliases = {id(t): [None, 0] for t in leaves}
            except Exception as e:
                self._failed(e)

    def after_backward(self) -> None:
        if self.on and self._leaves:
            try:
                self._arm()
            except Exception as e:
                self._failed(e)

    def _arm(self) -> None:
        self._snap = [_state(r()) for r in self._leaves]
        for entry in self._aliases.values():
            if entry[0] is not None:
                entry[1] = entry[0]._version
        self._data_set = False
        self.armed = True
        if self._through_data and self._patcher is None:
            self._wrap_data()

    # ------------------------------------------------------------------ the check
    def changed(self) -> bool:
        """Whether the watched parameters have changed since the last backward ended: a step
        ended. Disarms when they have (the next backward arms again)."""
        if not self.armed:
            return False
        try:
            return self._changed()
        except Exception as e:
            self._failed(e)
            return False

    def _changed(self) -> bool:
        own = any(r() is not None and _state(r()) != s for r, s in zip(self._leaves, self._snap))
        if not own and not self._data_set and not any(
                a is not None and a._version != v for a, v in self._aliases.values()):
            return False
        self.armed = False
        if own and self._through_data:   # in place or a new .data: the counters see every update
            self._through_data = False
            self._unwrap_data()
        return True

    # ------------------------------------------------------------------ Tensor.data
    def _wrap_data(self) -> None:
        updates = self
        compiling = torch.compiler.is_compiling

        def get(t):
            d = _DATA.__get__(t)
            if compiling():   # traced by torch.compile: nothing here it cannot trace
                return d
            entry = updates._aliases.get(id(t))   # read each time: a new sample replaces the dict
            if entry is not None:
                entry[0], entry[1] = d, 0   # a fresh alias: its own counter starts at 0
            return d

        def set_(t, value):
            if not compiling() and id(t) in updates._aliases:
                updates._data_set = True
            _DATA.__set__(t, value)

        self._patcher = self._new_patcher()
        self._patcher.set(torch.Tensor, "data", property(get, set_, doc=_DATA.__doc__))

    def _unwrap_data(self) -> None:
        if self._patcher is not None:
            self._patcher.undo()
            self._patcher = None
        for entry in self._aliases.values():
            entry[0] = None   # no longer kept up to date: the counters say it


def _state(t) -> tuple | None:
    if t is None:
        return None
    try:
        return t._version, t.data_ptr()
    except Exception:   # a tensor without storage of its own (sparse, a wrapper subclass)
        return t._version, None
