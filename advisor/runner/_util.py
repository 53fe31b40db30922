"""Small helpers shared by the runner's parent and child sides (no torch import here)."""

from __future__ import annotations

import json
import math
import os
import sys


def flush_std() -> None:
    for s in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if s is not None:
                s.flush()
        except Exception:
            pass


def flush_open_files(own_dir: str | None = None) -> None:
    """Flush and close the script's open files, as a normal exit would before the process ends
    with os._exit (advisor stopping the script): a file object still referenced is otherwise
    never flushed. The standard streams are flushed, not closed; files under ``own_dir``
    (advisor's run directory) are left to advisor, but for the script's redirected writes in
    its ``outputs/``."""
    import gc
    import io

    std = {id(s) for s in (sys.stdout, sys.stderr, sys.stdin, sys.__stdout__, sys.__stderr__, sys.__stdin__)}
    own = os.path.realpath(own_dir) + os.sep if own_dir else None
    redirected = own + "outputs" + os.sep if own else None
    try:
        objects = gc.get_objects()
    except Exception:
        return
    kinds = (io.TextIOWrapper, io.BufferedWriter, io.BufferedRandom)
    # type(), not isinstance(): an object's __class__ may be a property that warns or raises
    files = [o for o in objects if issubclass(type(o), kinds)]
    # text layers first: their buffers go into the binary files they wrap
    files.sort(key=lambda f: not isinstance(f, io.TextIOWrapper))
    for f in files:
        try:
            if f.closed or id(f) in std:
                continue
            name = getattr(f, "name", None)
            path = os.path.realpath(name) if isinstance(name, str) else ""
            if own and path.startswith(own) and not path.startswith(redirected):
                continue
            f.flush()
            if isinstance(name, str):   # a file the script opened by path; its descriptor otherwise
                f.close()
        except Exception:   # a broken file must not keep the results from being saved
            continue


def clean_json(obj):
    """Return a JSON-ready copy: non-finite floats become None, tuples lists, odd objects str."""
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): clean_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean_json(v) for v in obj]
    return str(obj)


def write_json_atomic(path: str, obj) -> None:
    """Write obj as JSON to path via a temporary file and rename (readers never see half a file)."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(clean_json(obj), f, indent=1, allow_nan=False)
    os.replace(tmp, path)


def mirror_tree(root: str, dest: str, copies=()) -> None:
    """``dest`` mirrors the directory ``root``: each file in ``copies`` (relative paths) is a real
    copy, the directories above them are real, every other entry of those directories is a
    symbolic link to the original. A sandboxed process starts in such a mirror of the user's
    working directory (its relative reads find the user's files, its new files land in the run
    directory), and the patch is applied to one (advisor.verify)."""
    import shutil
    from pathlib import Path

    root, dest = os.path.realpath(root), os.path.abspath(dest)
    shutil.rmtree(dest, ignore_errors=True)
    real_dirs = {""}
    for rel in copies:
        parts = Path(rel).parts[:-1]
        real_dirs.update(os.path.join(*parts[:k]) if k else "" for k in range(len(parts) + 1))
    for d in sorted(real_dirs):
        os.makedirs(os.path.join(dest, d), exist_ok=True)
        try:
            entries = os.listdir(os.path.join(root, d))
        except OSError:
            continue
        for name in entries:
            rel = os.path.join(d, name) if d else name
            if rel in real_dirs or name == "__pycache__":
                continue
            src, out = os.path.join(root, rel), os.path.join(dest, rel)
            if rel in copies:
                shutil.copy2(src, out)
            else:
                os.symlink(src, out)


def read_json(path: str):
    """The parsed JSON at path, or None when it is missing or unreadable."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


# advisor's pid, as the parent gives it to each child (runner.parent._spawn; bootstrap.py
# takes it out of the environment before the script runs). os.getppid() read later is not
# enough: a child whose advisor died while it imported torch was reparented by then, and it
# waited for its new parent's spec forever.
PARENT_ENV = "ADVISOR_PARENT_PID"
PARENT_PID: int | None = None


def take_parent_pid() -> None:
    """bootstrap.py, first thing: advisor's pid out of the environment (the script does not
    see it) into PARENT_PID."""
    global PARENT_PID
    value = os.environ.pop(PARENT_ENV, None)
    PARENT_PID = int(value) if value and value.isdigit() else None


def wait_line(fifo: str) -> str | None:
    """The line advisor writes into the FIFO at `fifo` (a spec's path), read by a child that
    waits for it (a process started ahead, a process held at its first CUDA use); None when
    the parent died first (nobody will write) or the FIFO could not be read."""
    import threading

    parent = PARENT_PID or os.getppid()
    if os.getppid() != parent:
        return None
    got: list = []

    def read() -> None:
        try:
            with open(fifo, encoding="utf-8") as f:  # blocks until advisor opens its end
                got.append(f.readline().strip())
        except OSError:
            pass

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    while reader.is_alive():
        reader.join(1.0)
        if os.getppid() != parent:
            return None
    return got[0] if got else None


def one_line_exception(exc: BaseException, limit: int = 200) -> str:
    """'ValueError: boom' (first line of the message, shortened)."""
    name = type(exc).__name__
    try:
        msg = str(exc)
    except Exception:  # a broken __str__ must not break the runner
        msg = ""
    msg = msg.strip().splitlines()[0] if msg.strip() else ""
    if len(msg) > limit:
        msg = msg[: limit - 1] + "…"
    return f"{name}: {msg}" if msg else name


_MISSING = object()


class Patcher:
    """Sets attributes and puts the originals back (in reverse order) on undo()."""

    def __init__(self) -> None:
        self._undo: list = []

    def set(self, obj, name: str, value) -> None:
        own = vars(obj) if isinstance(obj, type) else getattr(obj, "__dict__", {})
        old = own.get(name, _MISSING)
        setattr(obj, name, value)
        self._undo.append((obj, name, old))

    @property
    def active(self) -> bool:
        """Something is set or added and not undone yet."""
        return bool(self._undo)

    def add(self, handle) -> None:
        """Keep a removable handle (torch hooks) to remove on undo()."""
        self._undo.append((handle, None, None))

    def undo(self) -> None:
        while self._undo:
            obj, name, old = self._undo.pop()
            try:
                if name is None:
                    obj.remove()
                elif old is _MISSING:
                    delattr(obj, name)
                else:
                    setattr(obj, name, old)
            except Exception:
                pass

# The fewest timed steps an answer rests on: a window the script ends inside keeps this many
# (runner/window.py), and a short script's timing run asks for at least this many (advisor.schedule).
MIN_TIMED = 3
