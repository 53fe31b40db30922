"""Signs of work between steps, for the parent's stall clock (runner/parent.py).

The parent stops a script as stalled when its progress.jsonl gets nothing for the stall limit.
Steps write their records; between them the child writes an {"stage": "alive"} record, at most
one a second (ProgressLog.alive), from the hooks that see work: a module forward (the loop
hooks), a DataLoader batch, a backward, a torch.save (runner/hooks.py). An evaluation pass or
checkpoints written one after another are progress. A sleep, a deadlock, a hung collective, or
one call that outlasts the limit (a recompile, one huge save) is a stall.

In the timed window the loop hooks are off (measured steps pay nothing for them), so an
evaluation pass between timed steps that draws no DataLoader batch would go unseen. There a
thread (Watch) looks four times a second at how long the script has written nothing; past
max(ARM_S, ARM_STEPS median steps), which no ordinary step reaches, it arms a global forward
pre-hook that only calls ProgressLog.alive, and ends. The next step boundary takes the hook away
and starts the thread again. The only steps that pay for the hook are those that had already
paused that long, and a stall's stack dump (stacks.txt) shows the script's threads alone. The
hook is never armed once torch.compile has compiled anything: Dynamo guards on the global
module hooks, and adding one would recompile the model (the loop hooks stay in place for a
compiled model, and report its forwards themselves).
"""

from __future__ import annotations

import threading
from time import monotonic

import torch

from advisor.runner.oneoffs import compiled_graphs

ARM_S = 1.0      # the least silence before the watch arms its hook
ARM_STEPS = 3    # ... and at least this many median steps
POLL_S = 0.25

from advisor.runtime.capture import capturing as _is_compiling  # noqa: E402 - Dynamo or a jit trace


class Watch:
    """In the timed window of a model that is not compiled: arms a liveness-only forward
    pre-hook while the script is silent between steps (see the module's docstring)."""

    def __init__(self, ctl):
        self.c = ctl
        self.handle = None       # the armed hook's RemovableHandle
        self._lock = threading.Lock()
        self._stop: threading.Event | None = None
        self._since = 0.0

    def start(self) -> None:
        if self._stop is not None:
            return
        self._stop = threading.Event()
        self._spawn()

    def _spawn(self) -> None:
        self._since = monotonic()  # not the silence before (a quiet wait before the window)
        threading.Thread(target=self._run, args=(self._stop,), name="advisor-liveness", daemon=True).start()

    def stop(self) -> None:
        with self._lock:
            if self._stop is not None:
                self._stop.set()
                self._stop = None
        self.disarm()

    def disarm(self) -> None:
        """At a step boundary (main thread): the hook off again, and the thread watching again.
        One attribute read when unarmed."""
        if self.handle is None:
            return
        with self._lock:
            h, self.handle = self.handle, None
            if h is not None:
                h.remove()
                if self._stop is not None and not self._stop.is_set():
                    self._spawn()

    def after_fork(self) -> None:
        """In a forked process (a DataLoader worker): no thread here, and the lock may have been
        held by it at the fork; the hook goes, lock-free."""
        self._lock = threading.Lock()
        self._stop = None
        h, self.handle = self.handle, None
        if h is not None:
            try:
                h.remove()
            except Exception:
                pass

    # ------------------------------------------------------------------ the thread
    def _run(self, stop: threading.Event) -> None:
        while not stop.wait(POLL_S):
            try:
                silent = monotonic() - max(self.c.progress_log.last_record, self._since)
                if silent >= self._arm_after() and self._arm(stop):
                    return  # armed: the next step boundary starts a thread again
            except Exception as e:  # never the script's problem
                self.c.internal_error("liveness watch", e)
                return

    def _arm_after(self) -> float:
        c = self.c
        times = c.window.step_times_ms[-25:] or c.startup.untimed_ms[1:][-25:]
        med = sorted(times)[len(times) // 2] / 1e3 if times else 0.0
        return max(ARM_S, ARM_STEPS * med)

    def _arm(self, stop: threading.Event) -> bool:
        if compiled_graphs():
            return False
        with self._lock:
            if stop.is_set() or self.handle is not None:
                return True
            # The global hook dicts are copied into tuples before _call_impl iterates them, so
            # adding one from this thread while the main thread calls modules is safe.
            self.handle = torch.nn.modules.module.register_module_forward_pre_hook(self._hook)
            return True

    def _hook(self, module, args):
        if not _is_compiling():
            self.c.progress_log.alive()
        return None
