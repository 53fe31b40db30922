"""Following a child process while it runs (runner/parent.py): its progress.jsonl read as it
grows and passed on, Ctrl-C counted and forwarded, and the child stopped when the parent's
limits say so: SIGINT first (python raises KeyboardInterrupt and the script's results are
saved), its whole process group killed after the grace period."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time

from advisor.runner import ranks

_POLL_S = 0.1


# When each process group advisor stopped (SIGSTOP) was stopped and continued, in wall time:
# the stops are no part of its lead-in (runner/startup.py), and only advisor knows of them.
_stops: dict[int, list[list[float]]] = {}
_stops_lock = threading.Lock()


def kill_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError, OSError):
        return
    if sig in (signal.SIGSTOP, signal.SIGCONT):
        _note_stop(pgid, sig == signal.SIGSTOP)


def _note_stop(pgid: int, stopped: bool) -> None:
    now = round(time.time(), 3)
    with _stops_lock:
        spans = _stops.setdefault(pgid, [])
        if stopped and not (spans and spans[-1][1] is None):
            spans.append([now, None])
        elif not stopped and spans and spans[-1][1] is None:
            spans[-1][1] = now


def stops_of(pgid: int | None) -> list[list[float]]:
    """The [stopped, continued] spans of the process group, taken (a group's id is a pid, which
    a later process may get); a stop not yet continued ends now."""
    with _stops_lock:
        spans = _stops.pop(pgid, []) if pgid else []
    return [[a, round(time.time(), 3) if b is None else b] for a, b in spans]


def _interrupt(proc, pgid: int, spec: dict) -> None:
    """SIGINT to the child, and with several ranks to every rank: torch.distributed.run answers
    its own SIGINT with SIGTERM to its workers, which would die without saving."""
    if ranks.nproc(spec) > 1:
        kill_group(pgid, signal.SIGINT)
    else:
        _send(proc, signal.SIGINT)


def _send(proc, sig) -> None:
    try:
        proc.send_signal(sig)
    except (ProcessLookupError, OSError):
        pass


class Tail:
    """Reads complete new lines of a JSON-lines file."""

    def __init__(self, path: str):
        self.path = path
        self.pos = 0
        self.buf = b""

    def read(self) -> list[dict]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.pos)
                chunk = f.read()
        except OSError:
            return []
        self.pos += len(chunk)
        self.buf += chunk
        *lines, self.buf = self.buf.split(b"\n")
        out = []
        for line in lines:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict):
                out.append(rec)
        return out


class Signals:
    """SIGINT, SIGTERM and SIGHUP counted while the child runs (advisor's own Ctrl-C handler,
    if any, stands aside), and the handlers before put back after. Only the main thread can set
    handlers; elsewhere none is counted."""

    def __init__(self):
        self.count = 0
        self._old: dict = {}
        # the child's process group while it runs (run_child sets it): a thread beside the one
        # that follows it may stop and continue it (advisor.trials.windows)
        self.pgid: int | None = None

    def _on_signal(self, signum, frame) -> None:
        self.count += 1

    def __enter__(self) -> Signals:
        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)):
                if s is None:
                    continue
                try:
                    self._old[s] = signal.signal(s, self._on_signal)
                except (ValueError, OSError):
                    pass
        return self

    def __exit__(self, *exc) -> bool:
        for s, h in self._old.items():
            try:
                signal.signal(s, h)
            except (ValueError, OSError):
                pass
        return False


class Progress:
    """What the child's progress.jsonl has said, passed on to on_progress (all but the "alive"
    records) and kept for the limits: when the script began, whether it has stepped, when it
    last showed work after its first step, and the intervals between steps on its clock."""

    def __init__(self, path: str, on_progress):
        self.tail = Tail(path)
        self.on_progress = on_progress
        self.steps = 0
        self.first_step = False
        self.started_at = None   # when the script itself began (the child's "started" record)
        self.last_seen = None    # when the child last reported progress, after its first step
        self.last_t = None       # the child's time of its last step record
        self.intervals: list[float] = []

    def read(self) -> None:
        for rec in self.tail.read():
            self._take(rec)

    def _take(self, rec: dict) -> None:
        stage = str(rec.get("stage", ""))
        step = int(rec.get("step") or 0)
        if stage == "alive":  # work between steps (runner/liveness.py): no step, not shown
            if self.first_step:
                self.last_seen = time.monotonic()
            return
        if stage in ("warmup", "profile", "measure") and step >= 1:
            self.first_step = True
        elif stage == "started" and self.started_at is None:
            self.started_at = time.monotonic()
        if self.first_step:
            t_rec = rec.get("t") if isinstance(rec.get("t"), (int, float)) else None
            if step > self.steps and self.last_t is not None and t_rec is not None:
                self.intervals.append((t_rec - self.last_t) / (step - self.steps))   # the child's clock
            if step > self.steps:
                self.last_t = t_rec
            self.last_seen = time.monotonic()
        self.steps = max(self.steps, step)
        self._tell(stage, step, rec)

    def read_rest(self) -> None:
        """Once the child has ended: its last records, passed on; of them only the steps count."""
        for rec in self.tail.read():
            self.steps = max(self.steps, int(rec.get("step") or 0))
            if rec.get("stage") != "alive":
                self._tell(str(rec.get("stage", "")), int(rec.get("step") or 0), rec)

    def _tell(self, stage: str, step: int, rec: dict) -> None:
        if self.on_progress is not None:
            self.on_progress(stage, step, {k: v for k, v in rec.items() if k not in ("stage", "step")})


class Stop:
    """How advisor stops the child: SIGINT first (python raises KeyboardInterrupt and the child
    saves), the group's SIGKILL once the grace period is over. The first Ctrl-C is forwarded so;
    a second one kills the group at once."""

    def __init__(self, proc: subprocess.Popen, spec: dict, grace: float):
        self.proc = proc
        self.pgid = proc.pid  # a new session: the child leads its own process group
        self.spec = spec
        self.grace = grace
        self.reason: str | None = None   # why advisor stopped the child
        self.kill_at: float | None = None  # when to SIGKILL the group if it is still alive
        self.interrupted = False   # Ctrl-C was pressed
        self.forwarded = 0         # presses seen so far
        self.stalled = False       # advisor stopped the script as stalled

    def on_presses(self, presses: int, now: float) -> None:
        if presses <= self.forwarded:
            return
        self.forwarded = presses
        self.interrupted = True
        if presses == 1:
            _interrupt(self.proc, self.pgid, self.spec)
            self.kill_at = now + self.grace
        else:  # pressed again: stop waiting
            kill_group(self.pgid, signal.SIGKILL)

    def for_limit(self, reason: str, stalled: bool, now: float) -> None:
        self.reason = reason
        if stalled:
            self.stalled = True
            _send(self.proc, getattr(signal, "SIGUSR2", signal.SIGINT))  # faulthandler: the stacks
            time.sleep(0.5)
        _interrupt(self.proc, self.pgid, self.spec)  # python raises KeyboardInterrupt: the child saves
        self.kill_at = now + self.grace

    def kill_when_due(self, now: float) -> None:
        if self.kill_at is not None and now > self.kill_at:
            kill_group(self.pgid, signal.SIGKILL)
            self.kill_at = now + 3600


def follow(proc: subprocess.Popen, progress: Progress, limits, stop: Stop, signals: Signals) -> int:
    """Follow the child until it ends, passing its progress on and stopping it at Ctrl-C or past
    a limit; its return code. Whatever happens here, the child's process group is gone after."""
    rc = None
    try:
        while True:
            try:
                rc = proc.wait(timeout=_POLL_S)
            except subprocess.TimeoutExpired:
                rc = None
            progress.read()
            if rc is not None:
                return rc
            now = time.monotonic()
            stop.on_presses(signals.count, now)
            if stop.reason is None and not stop.interrupted:
                passed = limits.passed(progress, now)
                if passed is not None:
                    stop.for_limit(*passed, now)
            stop.kill_when_due(now)
    finally:
        if rc is None:  # an error of our own (e.g. in on_progress): do not leave the child behind
            kill_group(stop.pgid, signal.SIGKILL)
            proc.wait()
        kill_group(stop.pgid, signal.SIGKILL)  # leftover DataLoader workers etc.
