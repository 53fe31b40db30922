"""A Python number whose value is read from the GPU when it is first needed.

``defer-syncs`` makes ``.item()`` called from the user's code return a ``Deferred``: the
value is copied device→host into pinned memory on the stream, without waiting, and the
host waits (for that copy only) when something needs the number itself: printing or
formatting it, comparing it, ``float()``/``int()``/``bool()``, hashing, pickling, or an
attribute of the number. Arithmetic with it (``running_loss += loss.item()``) is recorded
and done later, on the host, in the same order with the same Python types, so every value
is bit-identical to the eager one; only *when* the host waits changes.

What cannot take a ``Deferred`` fails loudly (``json.dumps``, ``torch.tensor(x)``, a
library that checks ``isinstance(x, float)`` and raises): the trial then crashes and is
rejected with that error. A long chain of pending arithmetic is folded as soon as its
newest copy has landed (``torch.cuda.Event.query``, no wait), and at ``MAX_DEPTH`` at the
latest, so memory and recursion stay bounded however long the script runs.
"""

from __future__ import annotations

import collections
import numbers
import operator
import weakref

MAX_DEPTH = 64


class Deferred:
    __slots__ = ("_fn", "_value", "_depth", "_events", "__weakref__")

    def __new__(cls, fn=None, depth: int | None = None, events: dict | None = None):
        if depth is None:
            # Deferred(x), as code that converts with type(x)(value) does (statistics.mean):
            # the plain number, as the eager float or int would have given.
            return int(fn) if isinstance(fn, numbers.Rational) and fn.denominator == 1 else float(fn)
        return super().__new__(cls)

    def __init__(self, fn, depth: int, events: dict):
        self._fn = fn            # () -> the number; None once evaluated
        self._value = None
        self._depth = depth      # pending operations below this one
        self._events = events    # stream key -> (sequence number, event) of the newest copy

    # ------------------------------------------------------------------ evaluation
    def value(self):
        fn = self._fn
        if fn is not None:
            self._value = fn()
            self._fn = None
            self._events = {}
        return self._value

    def _landed(self) -> bool:
        """Every copy this value needs has arrived (no wait)."""
        return all(ev.query() for _, ev in self._events.values())


# Leaves not read yet, oldest first. A script that keeps every loss (losses.append(x.item()))
# and reads none would hold a pinned buffer and an event per step: each new leaf first reads
# the oldest ones whose copies have landed (no wait), so only those in flight stay pending.
_pending: collections.deque = collections.deque()


def leaf(read, event, stream_key, seq: int) -> Deferred:
    """The value ``read()`` returns once ``event`` (recorded after its copy) has completed."""
    while _pending:
        old = _pending[0]()
        if old is not None and old._fn is not None:
            if not old._landed():
                break
            old.value()
        _pending.popleft()

    def fn():
        event.synchronize()
        return read()
    d = Deferred(fn, 0, {stream_key: (seq, event)})
    _pending.append(weakref.ref(d))
    return d


def _operand(x):
    """A Deferred operand, folded to its number when that costs no wait (or when the chain is
    deep); anything else as is."""
    if not isinstance(x, Deferred):
        return x
    if x._fn is None or x._depth >= MAX_DEPTH or x._landed():
        return x.value()
    return x


def _combine(op, args) -> Deferred | object:
    args = tuple(_operand(a) for a in args)
    lazy = [a for a in args if isinstance(a, Deferred)]
    if not lazy:
        return op(*args)
    if not all(isinstance(a, (Deferred, numbers.Number)) for a in args):
        # with a tensor, an array, a str...: what the number would do, now (a Deferred
        # holding a tensor would no longer behave like one)
        return op(*(a.value() if isinstance(a, Deferred) else a for a in args))
    events: dict = {}
    for a in lazy:
        for key, (seq, ev) in a._events.items():
            if key not in events or events[key][0] < seq:  # on one stream the newest copy lands last
                events[key] = (seq, ev)
    depth = 1 + max(a._depth for a in lazy)
    return Deferred(lambda: op(*(a.value() if isinstance(a, Deferred) else a for a in args)), depth, events)


def _binary(op):
    def forward(self, other):
        return _combine(op, (self, other))

    def reflected(self, other):
        return _combine(op, (other, self))
    return forward, reflected


def _unary(op):
    return lambda self: _combine(op, (self,))


def _now(fn):
    """A method that needs the number itself."""
    return lambda self, *a: fn(self.value(), *a)


for _name, _op in (("add", operator.add), ("sub", operator.sub), ("mul", operator.mul),
                   ("truediv", operator.truediv), ("floordiv", operator.floordiv),
                   ("mod", operator.mod), ("pow", pow),
                   ("and", operator.and_), ("or", operator.or_), ("xor", operator.xor),
                   ("lshift", operator.lshift), ("rshift", operator.rshift)):
    _fwd, _ref = _binary(_op)
    setattr(Deferred, f"__{_name}__", _fwd)
    setattr(Deferred, f"__r{_name}__", _ref)
for _name, _op in (("neg", operator.neg), ("pos", operator.pos), ("abs", abs), ("invert", operator.invert)):
    setattr(Deferred, f"__{_name}__", _unary(_op))
for _name, _fn in (("float", float), ("int", int), ("index", operator.index), ("bool", bool),
                   ("complex", complex), ("round", round), ("trunc", lambda v: v.__trunc__()),
                   ("floor", lambda v: v.__floor__()), ("ceil", lambda v: v.__ceil__()),
                   ("format", format), ("str", str), ("repr", repr), ("hash", hash), ("divmod", divmod),
                   ("eq", operator.eq), ("ne", operator.ne), ("lt", operator.lt),
                   ("le", operator.le), ("gt", operator.gt), ("ge", operator.ge)):
    setattr(Deferred, f"__{_name}__", _now(_fn))
Deferred.__rdivmod__ = lambda self, other: divmod(other, self.value())


def _number(self):
    return self.value()


Deferred.__copy__ = _number
Deferred.__deepcopy__ = lambda self, memo: self.value()
Deferred.__reduce__ = lambda self: (type(self.value()), (self.value(),))
Deferred.__getattr__ = lambda self, name: getattr(self.value(), name)  # .real, .is_integer(), ...
numbers.Real.register(Deferred)
