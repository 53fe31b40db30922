"""The next epoch's permutation of a shuffled, preloaded DataLoader, made ahead by a
background thread (advisor.interventions.preload).

A RandomSampler epoch starts with one draw from the global CPU generator (its seed) and a
``randperm`` of the dataset's length: most of what the host spends at every epoch start of
a preloaded dataset (docs/trials.md), mostly OpenMP threads waking after the idle step; with
the host ahead of the GPU each such start also empties the launch queue.
"""

from __future__ import annotations

import os
import threading
import weakref

import torch


class Speculation:
    """One shuffled loader's next permutation, made ahead by a background thread.

    RandomSampler's permutation depends only on its seed, the next draw of the global CPU
    generator: a copy of that generator's state tells the next epoch's seed unless the script
    draws in between. The guess is made when the epoch's last batch is handed out (its step is
    the time the randperm has), again when the epoch ends (the last step's draws are in then)
    and after every other preloaded loader's draw (a validation loader's base seed between
    two epochs). The epoch start still draws the real seed from the global generator, so the
    script's random stream is untouched, and takes a permutation only if it was made from
    that very seed: a wrong guess (the script drew or seeded in between) costs the randperm
    at the epoch start, as before, never another order.
    """

    def __init__(self, n: int, pin: bool, skip: int):
        self.n, self.pin = n, pin
        self.skip = skip     # global draws the next iter() makes before the seed
        self.guessed = None  # the seed last asked for
        self.ready = None    # (seed, permutation) from the worker
        self.hits = 0        # epoch starts that took a permutation made ahead
        self.misses = 0      # epoch starts that had guessed another seed

    def arm(self) -> None:
        _armed.add(self)
        self.guessed = None
        self.guess()

    def guess(self) -> None:
        """Ask for the permutation of the seed a copy of the global state draws next (a few
        microseconds when it is the one already asked for)."""
        if self not in _armed:
            return
        g = torch.Generator()
        g.set_state(torch.get_rng_state())
        for _ in range(self.skip + 1):  # as the iterator (base seed) and RandomSampler draw
            seed = int(torch.empty((), dtype=torch.int64).random_(generator=g))
        if seed == self.guessed:
            return
        # Pinned here, in the script's thread: the worker then makes no CUDA call (a
        # cudaHostAlloc from another thread breaks a CUDA graph being captured).
        buf = torch.empty(self.n, dtype=torch.int64, pin_memory=self.pin)
        with _cond:
            if _start_worker():
                _queue[self] = (seed, buf)  # replaces a guess the worker has not started
                self.guessed = seed
                _cond.notify_all()

    def take(self, seed: int) -> torch.Tensor | None:
        """The permutation for ``seed`` if made ahead (waited for if under way), else None."""
        with _cond:
            queued = _queue.get(self)
            if queued is not None and (queued[0] != seed or _running is not None):
                del _queue[self]  # wrong, or behind another: making it here is no slower
            while (_running == (self, seed) or self in _queue) and _worker.is_alive():
                _cond.wait(0.1)  # a worker that died would never notify
            ready, self.ready = self.ready, None
        hit = ready is not None and ready[0] == seed
        self.hits += hit
        self.misses += not hit and self.guessed is not None
        self.guessed = None
        _armed.discard(self)
        moved(self)  # this draw moved the global generator under the other loaders' guesses
        return ready[1] if hit else None


# One daemon worker thread in the process (a process that exits mid-randperm does not wait
# for it). Each loader has at most one permutation queued, a newer guess replacing it, so the
# work is bounded; and one long-lived thread keeps one OpenMP team for randperm's parallel
# fill, where a thread per job would start a new team each time.
_cond = threading.Condition()
_queue: dict = {}       # Speculation -> (seed, buffer)
_running = None         # (Speculation, seed) being made
_worker = None
_armed = weakref.WeakSet()  # speculations whose loader's next epoch has not started


def _start_worker() -> bool:
    global _worker
    if _worker is None or not _worker.is_alive():
        _worker = threading.Thread(target=_work, name="advisor-preload-randperm", daemon=True)
        try:
            _worker.start()
        except RuntimeError:  # no thread to be had: the epoch starts make their own
            _worker = None
    return _worker is not None


def _work() -> None:
    global _running
    while True:
        with _cond:
            while not _queue:
                _cond.wait()
            spec = next(iter(_queue))
            seed, buf = _queue.pop(spec)
            _running = (spec, seed)
        try:  # randperm releases the GIL: the script runs on meanwhile
            made = torch.randperm(spec.n, generator=torch.Generator().manual_seed(seed), out=buf)
        except Exception:  # a miss at the epoch start; the worker lives on
            made = None
        with _cond:
            _running = None
            if made is not None:
                spec.ready = (seed, made)
            _cond.notify_all()


def moved(by: Speculation | None) -> None:
    """A preloaded loader drew from the global generator: the other guesses may be stale."""
    for spec in list(_armed):
        if spec is not by:
            spec.guess()


def _forked() -> None:
    """A forked child has no worker, and maybe a lock the worker held: start afresh."""
    global _cond, _queue, _running, _worker
    _cond, _queue, _running, _worker = threading.Condition(), {}, None, None


os.register_at_fork(after_in_child=_forked)
