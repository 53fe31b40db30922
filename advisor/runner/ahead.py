"""Processes started ahead of their trial, parent side. A WarmChild has python and torch
started before its spec exists; a HeldChild was given a guessed spec (advisor.trials.lookahead) and
runs the script up to its first CUDA use, or into its warm-up, where it waits (runner/held.py)
to be advanced (from the CUDA use into the warm-up), released as its trial, or dropped."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

from advisor.runner._util import write_json_atomic
from advisor.runner.follow import Tail, kill_group
from advisor.runner.parent import _spawn, start_child

# What may differ between a guessed spec and the trial's: where it runs and what it is called.
_PLACE = ("run_dir", "run_name", "hold", "hold_at")


def spec_key(spec: dict) -> str:
    """A spec's identity for matching a guess: everything but its place and name."""
    return json.dumps({k: v for k, v in spec.items() if k not in _PLACE}, sort_keys=True, default=str)


# Processes started ahead run at a lower CPU priority: they take the cores the running trial
# leaves idle (at equal priority, guesses making their data slow the running trial's own
# start-up: docs/measurement.md). Back to normal when their turn comes
# (allowed to root; elsewhere they stay lower, beside guesses as low).
AHEAD_NICE = 10


def _renice(pgid: int, value: int) -> None:
    try:
        os.setpriority(os.PRIO_PGRP, pgid, value)
    except (OSError, AttributeError):
        pass


def _fifo(root: str | None = None) -> tuple[str, str]:
    """A FIFO in a directory of its own: under the sandbox's real directory when there is one
    (a FIFO seen through an overlay is another pipe than advisor's)."""
    if root:
        os.makedirs(os.path.join(root, ".fifo"), exist_ok=True)
    d = tempfile.mkdtemp(prefix="advisor-fifo-", dir=os.path.join(root, ".fifo") if root else None)
    path = os.path.join(d, "go")
    os.mkfifo(path)
    return d, path


class _StartedAhead:
    """A child process advisor started before its turn, in a session (process group) of its
    own, waiting on a FIFO for a spec's path."""

    proc: subprocess.Popen
    fifo_dir: str
    fifo: str
    paused = False

    def _stoppable(self) -> bool:
        return self.proc.poll() is None

    def pause(self) -> None:
        """Stopped (SIGSTOP, its whole group) while another process's steps are timed."""
        if not self.paused and self._stoppable():
            kill_group(self.proc.pid, signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        if self.paused:
            kill_group(self.proc.pid, signal.SIGCONT)
            self.paused = False

    def _hand_over(self, spec_path: str, nice: int = 0, keep_fifo: bool = False) -> bool:
        """The spec's path written into the FIFO, if its reader waits there yet; the process
        then runs at `nice`."""
        try:
            fd = os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK)  # fails until the reader is there
        except OSError:
            return False
        _renice(self.proc.pid, nice)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(spec_path + "\n")
        if not keep_fifo:
            shutil.rmtree(self.fifo_dir, ignore_errors=True)
        return True

    def _kill(self) -> None:
        if self.proc.poll() is None:
            kill_group(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        shutil.rmtree(self.fifo_dir, ignore_errors=True)


class WarmChild(_StartedAhead):
    """A child process started before its spec exists: python starts and imports torch (about a
    second a process) while the previous trial runs, then waits on a FIFO for the
    spec's path (bootstrap.py --wait). Same interpreter, cwd, environment and session as
    run_child's own; stdin is the terminal's, as there."""

    def __init__(self, cwd: str | None, stdout_to_stderr: bool = False, root: str | None = None):
        self.cwd, self.stdout_to_stderr, self.root = cwd, stdout_to_stderr, root
        self.fifo_dir, self.fifo = _fifo(root)
        self.proc = _spawn(["--wait", self.fifo], cwd, stdout_to_stderr, jail=root)
        _renice(self.proc.pid, AHEAD_NICE)

    def fits(self, cwd: str | None, stdout_to_stderr: bool, root: str | None = None) -> bool:
        return self.proc.poll() is None and (cwd or None) == (self.cwd or None) \
            and stdout_to_stderr == self.stdout_to_stderr and (root or None) == (self.root or None)

    def go(self, spec_path: str, wait_s: float = 120.0) -> subprocess.Popen | None:
        """Hand the spec over (the process then runs at normal priority); None when the process
        died or never opened its end."""
        self.resume()
        deadline = time.monotonic() + wait_s
        while self.proc.poll() is None and time.monotonic() < deadline:
            if self._hand_over(spec_path):
                return self.proc
            time.sleep(0.02)
        self.close()
        return None

    def close(self) -> None:
        self._kill()


def start_warm(cwd: str | None, stdout_to_stderr: bool, root: str | None = None) -> WarmChild | None:
    """A process started ahead; ``root``: sandboxed, with that directory kept real."""
    try:
        return WarmChild(cwd, stdout_to_stderr, root)
    except (OSError, AttributeError):  # no FIFO here (os.mkfifo), or no process: it starts cold
        return None


class HeldChild(_StartedAhead):
    """A trial process started on a guess of its spec, in a directory of its own (`where`):
    the script runs up to its first CUDA use (hold_at "cuda"), or into its warm-up steps
    ("warmup"), and waits there (held.hold) until release() hands it the trial's spec (same
    fixes; its name and directory) or close() drops it. ``warm``: a WarmChild to start it
    from (python and torch already up)."""

    def __init__(self, spec: dict, where: str, warm: WarmChild | None = None, stdout_to_stderr: bool = False,
                 hold_at: str = "cuda"):
        self.key = spec_key(spec)
        self.spec = spec
        self.where = where
        self.hold_at = hold_at  # "cuda": at its first CUDA use; "warmup": before its last warm-up steps
        self.fifo_dir, fifo = _fifo(spec.get("sandbox_root"))
        os.makedirs(where)
        spec_path = os.path.join(where, "spec.json")
        write_json_atomic(spec_path, {**spec, "run_dir": where, "hold": fifo, "hold_at": hold_at})
        progress = os.path.join(where, "progress.jsonl")
        open(progress, "wb").close()
        self.tail = Tail(progress)
        self.spawned = time.time()
        self.proc, _ = start_child(spec_path, spec.get("cwd"), stdout_to_stderr, warm, spec)
        _renice(self.proc.pid, AHEAD_NICE)
        self.fifo = fifo
        self.held = False      # it reached the hold (nothing running, nothing queued on the GPU)
        self.runaway = False   # held at CUDA, it reached a training step without using CUDA first
        self.released = False

    def alive(self) -> bool:
        return self.proc.poll() is None and not self.runaway

    def at_hold(self) -> bool:
        for rec in self.tail.read():
            stage = rec.get("stage")
            if stage == "held":
                self.held = True
            elif stage in ("warmup", "profile", "measure") and not self.held and self.hold_at == "cuda":
                self.runaway = True  # training ungated, beside the trial that is timed: stop it
        if self.runaway:
            self.close()
        return self.held

    def warmed_up(self) -> bool:
        """It waits before its last warm-up steps: CUDA, compile and CUDA graphs are done."""
        return self.hold_at == "warmup" and self.alive() and self.at_hold()

    def _stoppable(self) -> bool:
        """One that waits at the hold too: its own thread is idle there, but its DataLoader
        workers go on filling their prefetch queues, and left running beside another trial's
        window they stall its steps."""
        return self.alive()

    def advance(self) -> bool:
        """Held at its first CUDA use: let it go on into its warm-up, to wait again before its
        last two warm-up steps (held.ADVANCE). False when it does not wait there (yet)."""
        from advisor.runner.held import ADVANCE

        if self.hold_at != "cuda" or not self.alive() or not self.at_hold():
            return False
        if not self._hand_over(ADVANCE, AHEAD_NICE, keep_fifo=True):
            return False
        self.hold_at, self.held = "warmup", False  # its next "held" is the warm-up one
        return True

    def release(self, spec: dict, spec_path: str, wait_s: float) -> subprocess.Popen | None:
        """Once it holds: its directory becomes spec["run_dir"], spec is written there (at
        spec_path) and passed on. None when it ended (or ran ahead ungated) first; then it
        is gone and its directory with it."""
        self.resume()
        deadline = time.monotonic() + wait_s
        while self.alive() and time.monotonic() < deadline:
            if not self.at_hold():
                time.sleep(0.02)
                continue
            if not self.released:  # it waits for the FIFO now: nothing of it writes as its directory moves
                target = spec["run_dir"]
                try:
                    os.rmdir(target)  # an empty directory made for the trial: replaced
                except OSError:
                    pass
                try:
                    os.rename(self.where, target)
                except OSError:
                    break
                self.where, self.released = target, True
                write_json_atomic(spec_path, spec)
            if self._hand_over(spec_path):
                return self.proc
            time.sleep(0.02)
        if self.released:  # moved, then ended before it read its spec: the trial starts afresh
            shutil.rmtree(self.where, ignore_errors=True)
            self.released = False
        self.close()
        return None

    def close(self) -> None:
        """Drop it: the process group killed, its directory and FIFO removed."""
        self._kill()
        if not self.released:
            shutil.rmtree(self.where, ignore_errors=True)
