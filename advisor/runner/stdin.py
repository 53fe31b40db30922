"""The script's standard input, the same for every process advisor starts.

A script that reads its stdin (``input()``, ``sys.stdin.read()``) must get the same bytes in
the baseline, in every trial and in the verification. advisor reads its own stdin once, when
it is not a terminal, and replays those bytes to each process through a pipe of its own, while
they are still arriving if need be. With a terminal, the baseline shares it, as python would;
the processes after it get an empty stdin (a trial that fails on it is failed with its reason).

``capture()`` is called once by ``advisor analyze``; without it every process inherits
advisor's stdin, as before (the Python API and the runner's own tests).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading


class _Replay:
    def __init__(self, stream):
        self.chunks: list[bytes] = []
        self.done = threading.Event()
        self.lock = threading.Lock()
        self.grown = threading.Condition(self.lock)
        threading.Thread(target=self._read, args=(stream,), daemon=True, name="advisor-stdin").start()

    def _read(self, stream) -> None:
        try:
            while True:
                chunk = os.read(stream.fileno(), 1 << 16)
                if not chunk:
                    break
                with self.grown:
                    self.chunks.append(chunk)
                    self.grown.notify_all()
        except (OSError, ValueError):
            pass
        finally:
            with self.grown:
                self.done.set()
                self.grown.notify_all()

    def pump(self, pipe) -> None:
        """Write every chunk, from the first, into ``pipe`` as they come; close at the end."""
        def run():
            i = 0
            try:
                while True:
                    with self.grown:
                        while i >= len(self.chunks) and not self.done.is_set():
                            self.grown.wait()
                        todo, i = self.chunks[i:], len(self.chunks)
                        last = self.done.is_set()
                    for c in todo:
                        pipe.write(c)
                        pipe.flush()
                    if last and i >= len(self.chunks):
                        break
            except (OSError, ValueError):
                pass   # the process ended without reading it all
            finally:
                try:
                    pipe.close()
                except OSError:
                    pass
        threading.Thread(target=run, daemon=True, name="advisor-stdin-pump").start()

    def size(self) -> int:
        with self.lock:
            return sum(len(c) for c in self.chunks)


_STATE: dict = {"mode": "inherit", "replay": None}


def capture(stream=None) -> str:
    """Take over advisor's stdin for the processes it starts; returns the mode:
    "replay" (not a terminal: read once, replayed to each), "terminal" or "none" (no stdin)."""
    stream = sys.stdin if stream is None else stream
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        _STATE.update(mode="none", replay=None)
        return "none"
    if os.isatty(fd):
        _STATE.update(mode="terminal", replay=None)
    else:
        _STATE.update(mode="replay", replay=_Replay(stream))
    return _STATE["mode"]


def release() -> None:
    """Back to inheriting (tests)."""
    _STATE.update(mode="inherit", replay=None)


def for_child(sandboxed: bool):
    """What Popen's ``stdin`` is for a new process: None (inherit), DEVNULL or PIPE."""
    mode = _STATE["mode"]
    if mode == "replay":
        return subprocess.PIPE
    if mode in ("terminal", "none") and sandboxed:
        return subprocess.DEVNULL
    return None


def started(proc: subprocess.Popen) -> None:
    """Feed a process started with ``for_child``'s PIPE."""
    replay = _STATE["replay"]
    if proc.stdin is not None and replay is not None:
        replay.pump(proc.stdin)


def summary() -> dict:
    replay = _STATE["replay"]
    out = {"mode": _STATE["mode"]}
    if replay is not None:
        out["bytes"] = replay.size()
    return out
