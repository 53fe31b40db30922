"""Processes started ahead of their trial, parent side. A WarmChild has python and torch
started before its spec exists; a HeldChild was given a guessed spec (advisor.lookahead) and
runs the script up to its first CUDA use, where it waits (runner/held.py) for its release."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

from advisor.runner._util import write_json_atomic
from advisor.runner.parent import _kill_group, _spawn, _Tail

# What may differ between a guessed spec and the trial's: where it runs and what it is called.
_PLACE = ("run_dir", "run_name", "hold")


def spec_key(spec: dict) -> str:
    """A spec's identity for matching a guess: everything but its place and name."""
    return json.dumps({k: v for k, v in spec.items() if k not in _PLACE}, sort_keys=True, default=str)


def _fifo() -> tuple[str, str]:
    d = tempfile.mkdtemp(prefix="advisor-fifo-")
    path = os.path.join(d, "go")
    os.mkfifo(path)
    return d, path


def _open_writer(path: str) -> int | None:
    """The FIFO's write end, once its reader waits on it (None until then)."""
    try:
        return os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return None


class WarmChild:
    """A child process started before its spec exists: python starts and imports torch (1 s
    a process on the 2-core CI machine) while the previous trial runs, then waits on a FIFO for the
    spec's path (bootstrap.py --wait). Same interpreter, cwd, environment and session as
    run_child's own; stdin is the terminal's, as there."""

    def __init__(self, cwd: str | None, stdout_to_stderr: bool = False):
        self.cwd, self.stdout_to_stderr = cwd, stdout_to_stderr
        self.dir, self.fifo = _fifo()
        self.proc = _spawn(["--wait", self.fifo], cwd, stdout_to_stderr)
        self.paused = False

    def fits(self, cwd: str | None, stdout_to_stderr: bool) -> bool:
        return self.proc.poll() is None and (cwd or None) == (self.cwd or None) \
            and stdout_to_stderr == self.stdout_to_stderr

    def go(self, spec_path: str, wait_s: float = 120.0) -> subprocess.Popen | None:
        """Hand the spec over; None when the process died or never opened its end."""
        self.resume()
        deadline = time.monotonic() + wait_s
        while self.proc.poll() is None and time.monotonic() < deadline:
            fd = _open_writer(self.fifo)  # fails until the reader is there
            if fd is None:
                time.sleep(0.02)
                continue
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(spec_path + "\n")
            shutil.rmtree(self.dir, ignore_errors=True)
            return self.proc
        self.close()
        return None

    def pause(self) -> None:
        """Stopped (SIGSTOP, its whole group) while another process's steps are timed."""
        if not self.paused and self.proc.poll() is None:
            _kill_group(self.proc.pid, signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        if self.paused:
            _kill_group(self.proc.pid, signal.SIGCONT)
            self.paused = False

    def close(self) -> None:
        if self.proc.poll() is None:
            _kill_group(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def start_warm(cwd: str | None, stdout_to_stderr: bool) -> WarmChild | None:
    try:
        return WarmChild(cwd, stdout_to_stderr)
    except (OSError, AttributeError):  # no FIFO here (os.mkfifo), or no process: it starts cold
        return None


class HeldChild:
    """A trial process started on a guess of its spec, in a directory of its own (`where`):
    the script runs up to its first CUDA use and waits there (held.hold) until release() hands
    it the trial's spec (same fixes; its name and directory) or close() drops it. ``warm``: a
    WarmChild to start it from (python and torch already up)."""

    def __init__(self, spec: dict, where: str, warm: WarmChild | None = None, stdout_to_stderr: bool = False):
        self.key = spec_key(spec)
        self.where = where
        self.fifo_dir, fifo = _fifo()
        os.makedirs(where)
        spec_path = os.path.join(where, "spec.json")
        write_json_atomic(spec_path, {**spec, "run_dir": where, "hold": fifo})
        progress = os.path.join(where, "progress.jsonl")
        open(progress, "wb").close()
        self.tail = _Tail(progress)
        self.spawned = time.time()
        cwd = spec.get("cwd")
        proc = warm.go(spec_path) if warm is not None and warm.fits(cwd, stdout_to_stderr) else None
        if proc is None:
            if warm is not None:
                warm.close()
            proc = _spawn([spec_path], cwd, stdout_to_stderr)
        self.proc = proc
        self.fifo = fifo
        self.held = False      # it reached the hold (nothing on the GPU, nothing running)
        self.runaway = False   # it reached a training step without using CUDA first: not held
        self.paused = False
        self.released = False

    def alive(self) -> bool:
        return self.proc.poll() is None and not self.runaway

    def at_hold(self) -> bool:
        for rec in self.tail.read():
            stage = rec.get("stage")
            if stage == "held":
                self.held = True
            elif stage in ("warmup", "profile", "measure") and not self.held:
                self.runaway = True  # training ungated, beside the trial that is timed: stop it
        if self.runaway:
            self.close()
        return self.held

    def pause(self) -> None:
        """Stopped while another process's steps are timed or profiled, unless it already
        waits at the hold (idle)."""
        if not self.paused and self.alive() and not self.at_hold():
            _kill_group(self.proc.pid, signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        if self.paused:
            _kill_group(self.proc.pid, signal.SIGCONT)
            self.paused = False

    def release(self, spec: dict, spec_path: str, wait_s: float) -> subprocess.Popen | None:
        """Once it holds: its directory becomes spec["run_dir"], spec is written there (at
        spec_path) and passed on. None when it ended (or ran ahead ungated) first; then it
        is gone and its directory with it."""
        self.resume()
        deadline = time.monotonic() + wait_s
        while self.alive() and time.monotonic() < deadline:
            self.at_hold()
            fd = _open_writer(self.fifo) if self.held else None
            if fd is None:
                time.sleep(0.02)
                continue
            # It waits in the read now: nothing of it writes while its directory moves.
            target = spec["run_dir"]
            try:
                os.rmdir(target)  # an empty directory made for the trial: replaced
            except OSError:
                pass
            try:
                os.rename(self.where, target)
            except OSError:
                os.close(fd)
                break
            self.where, self.released = target, True
            write_json_atomic(spec_path, spec)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(spec_path + "\n")
            shutil.rmtree(self.fifo_dir, ignore_errors=True)
            return self.proc
        self.close()
        return None

    def close(self) -> None:
        """Drop it: the process group killed, its directory and FIFO removed."""
        if self.proc.poll() is None:
            _kill_group(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        shutil.rmtree(self.fifo_dir, ignore_errors=True)
        if not self.released:
            shutil.rmtree(self.where, ignore_errors=True)
