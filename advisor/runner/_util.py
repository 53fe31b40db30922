"""Small helpers shared by the runner's parent and child sides (no torch import here)."""

from __future__ import annotations

import json
import math
import os
import sys
import sysconfig

ADVISOR_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def flush_std() -> None:
    for s in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if s is not None:
                s.flush()
        except Exception:
            pass


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


def workdir(spec: dict) -> str | None:
    """Where a sandboxed process starts (spec ``workdir``: absolute, or relative to its run
    directory, a mirror of the user's cwd made by ``ensure_workdir``); None: the user's cwd."""
    wd = spec.get("workdir")
    return None if not wd else wd if os.path.isabs(wd) else os.path.join(spec["run_dir"], wd)


def ensure_workdir(spec: dict) -> None:
    wd = workdir(spec)
    if wd and not os.path.isabs(spec["workdir"]) and not os.path.isdir(wd):
        mirror_tree(spec.get("cwd") or os.getcwd(), wd)


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


class SiteFinder:
    """Finds the call site of a config call: the first frame outside torch, advisor and the
    standard library, as "relative/path.py:LINE" (relative to cwd when inside it)."""

    def __init__(self, cwd: str, extra_skip: tuple[str, ...] = ()):
        self.cwd = os.path.realpath(cwd)
        skip = [ADVISOR_DIR, *extra_skip]
        paths = sysconfig.get_paths()
        self._stdlib = tuple(
            {os.path.realpath(p) + os.sep for p in (paths.get("stdlib"), paths.get("platstdlib")) if p}
        )
        self._sitepkgs = tuple(
            {os.path.realpath(p) + os.sep for p in (paths.get("purelib"), paths.get("platlib")) if p}
        )
        self._skip = tuple(os.path.realpath(p) + os.sep for p in skip)
        self._cache: dict[str, bool] = {}

    def _is_library(self, filename: str) -> bool:
        hit = self._cache.get(filename)
        if hit is not None:
            return hit
        if filename.startswith("<"):  # <frozen importlib._bootstrap>, <string>, ...
            res = True
        else:
            real = os.path.realpath(filename)
            res = real.startswith(self._skip)
            if not res and real.startswith(self._stdlib):
                res = not real.startswith(self._sitepkgs) and "site-packages" not in real and "dist-packages" not in real
        self._cache[filename] = res
        return res

    def is_script_code(self, filename: str) -> bool:
        """The user's own code: neither a library in the sense above (advisor, torch, the
        standard library) nor an installed package (a trainer or metrics library in
        site-packages, which expects what torch returns)."""
        return not self._is_library(filename) and "site-packages" not in filename \
            and "dist-packages" not in filename

    def display(self, filename: str) -> str:
        real = os.path.abspath(filename)
        cwd = self.cwd + os.sep
        for cand in (real, os.path.realpath(filename)):
            if cand.startswith(cwd):
                return cand[len(cwd):]
        return real

    def user_frame(self, depth: int = 1, script_only: bool = False):
        """The nearest frame outside the libraries; ``script_only``: of the user's own code,
        past an installed package's too."""
        keep = self.is_script_code if script_only else (lambda name: not self._is_library(name))
        f = sys._getframe(depth)
        while f is not None:
            if keep(f.f_code.co_filename):
                return f
            f = f.f_back
        return None

    def where(self, f) -> str:
        """A frame's "path:LINE", the path as display() gives it."""
        return f"{self.display(f.f_code.co_filename)}:{f.f_lineno}"

    def site(self, depth: int = 2) -> str | None:
        f = self.user_frame(depth)
        return None if f is None else self.where(f)

    def script_site(self, depth: int = 2) -> str | None:
        """The nearest frame of the user's own code, past an installed package's (a framework
        that wraps DataLoader.__init__ while the user's train_dataloader() runs); None when
        the call came from no such frame."""
        f = self.user_frame(depth + 1, script_only=True)
        return None if f is None else self.where(f)

    def caller_is_library(self, depth: int = 2) -> bool:
        """Whether the frame `depth` levels up (the direct caller) is library code."""
        try:
            f = sys._getframe(depth)
        except ValueError:
            return True
        return self._is_library(f.f_code.co_filename)


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
