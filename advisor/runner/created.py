"""What the baseline made that was not there before it, and did not read back: the paths every
process after it finds absent, so that each starts from the tree the baseline found.

A script that refuses an output directory that exists (``if out.exists(): raise``), makes one
without ``exist_ok``, or resumes from a checkpoint it finds, ran under the baseline as under
plain python; after it, the repeat and every trial found the baseline's directory and failed
before their first step, or resumed and ran a different program. The baseline records each
path it creates through Python (a file opened for writing, ``os.open`` with O_CREAT, a
directory made, a rename's destination), whoever calls, and each read of what it created
(a file opened for reading, a directory listed). A created path read back is the script's
input (a dataset it downloaded and extracted, a cache it built): it stays visible, else each
trial would make it again. The rest (output directories, logs, checkpoints) the sandboxed
processes see as deleted (runner/sandbox.py ``hide``), in both sandbox modes.

Only the baseline records (spec ``record_created``), in its main process (a DataLoader
worker's reads are its own), into FILE in its run directory; advisor's own directories,
libraries' caches and what tempfile and multiprocessing name in the temporary directory are
left out."""

from __future__ import annotations

import builtins
import io
import os
import tempfile

from advisor.runner._util import Patcher
from advisor.runner.sandbox import at_or_above, library_caches

FILE = "created.json"   # advisor.specs.CREATED_FILE: the parent names it in every sandboxed spec
LIMIT = 500        # top-most created paths kept; a script making more is judged on the first ones


def _abs(path) -> str | None:
    if isinstance(path, int):
        return None
    try:
        p = os.fspath(path)
    except TypeError:
        return None
    p = os.fsdecode(p) if isinstance(p, bytes) else p
    return os.path.abspath(p)


def _exists(full: str) -> bool:
    try:
        os.lstat(full)
        return True
    except (OSError, ValueError):
        return False


class Created:
    def __init__(self, run_dir: str, also_left_out=()):
        self.file = os.path.join(run_dir, FILE)
        left = [run_dir, "/dev", "/proc", "/sys", *also_left_out, *library_caches()]
        self.left_out = sorted({d for p in left for d in (os.path.abspath(p), os.path.realpath(p))})
        # what tempfile and multiprocessing name there (tmpXXXXXXXX, pymp-XXXXXXXX): random
        # names no later process looks for; a user's project under /tmp is recorded as any other
        self.temp = sorted({os.path.abspath(tempfile.gettempdir()), os.path.realpath(tempfile.gettempdir())})
        self.paths: dict[str, str] = {}     # top-most created path (abspath) -> its realpath
        self.read: set[str] = set()          # those read back
        self.patches = Patcher()
        self._saved: tuple | None = None
        self._pid = os.getpid()

    # ------------------------------------------------------------------ judging paths
    def _skip(self, full: str) -> bool:
        if any(full == d or full.startswith(d + os.sep) for d in self.left_out):
            return True
        for t in self.temp:
            if full.startswith(t + os.sep):
                return full[len(t) + 1:].split(os.sep, 1)[0].startswith(("tmp", "pymp-"))
        return False

    def before_create(self, path) -> str | None:
        """The absolute path a call may create, when nothing is there now (else None)."""
        full = _abs(path)
        if full is None or os.getpid() != self._pid or self._skip(full) or _exists(full):
            return None
        return full

    def created(self, full: str | None) -> None:
        if full is None or len(self.paths) >= LIMIT or self._top(full) is not None:
            return
        self.paths[full] = os.path.realpath(full)

    def moved_away(self, path) -> None:
        """A created path renamed (an atomic save's temporary file): it is gone from there."""
        full = _abs(path)
        if full is not None and full in self.paths:
            del self.paths[full]
            self.read.discard(full)

    def _top(self, full: str) -> str | None:
        """The created path that is ``full`` or a directory above it."""
        return at_or_above(full, self.paths.__contains__) if self.paths else None

    def reading(self, path) -> None:
        if not self.paths or os.getpid() != self._pid:
            return
        full = _abs(path)
        top = self._top(full) if full is not None else None
        if top is not None:
            self.read.add(top)

    def hidden(self) -> list[str]:
        """What the processes after the baseline find absent (both forms of each path)."""
        out = set()
        for top, resolved in self.paths.items():
            if top not in self.read:
                out.update((top, resolved))
        return sorted(out)

    def save(self) -> None:
        if os.getpid() != self._pid:
            return
        state = (tuple(self.paths), tuple(self.read))
        if state == self._saved:
            return
        self._saved = state
        from advisor.runner._util import write_json_atomic

        try:
            write_json_atomic(self.file, {"hidden": self.hidden(), "read_back": sorted(self.read)})
        except OSError:
            pass

    # ------------------------------------------------------------------ the hooks
    def install(self) -> None:
        rec = self
        real_open, real_os_open = builtins.open, os.open
        real_mkdir, real_rename, real_replace = os.mkdir, os.rename, os.replace
        real_listdir, real_scandir = os.listdir, os.scandir

        def open_(file, mode="r", *a, **k):
            writes = bool(set(str(mode)) & set("wax+"))
            full = rec.before_create(file) if writes else None
            if not writes:
                rec.reading(file)
            handle = real_open(file, mode, *a, **k)
            rec.created(full)
            return handle

        def os_open(path, flags, mode=0o777, *, dir_fd=None):
            full = rec.before_create(path) if dir_fd is None and flags & os.O_CREAT else None
            if dir_fd is None and not flags & (os.O_WRONLY | os.O_RDWR):
                rec.reading(path)
            fd = real_os_open(path, flags, mode, dir_fd=dir_fd)
            rec.created(full)
            return fd

        def mkdir(path, mode=0o777, *, dir_fd=None):
            full = rec.before_create(path) if dir_fd is None else None
            real_mkdir(path, mode, dir_fd=dir_fd)
            rec.created(full)

        def moved(real_fn):
            def move(src, dst, *, src_dir_fd=None, dst_dir_fd=None):
                full = rec.before_create(dst) if dst_dir_fd is None else None
                real_fn(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
                rec.moved_away(src if src_dir_fd is None else None)
                rec.created(full)
            return move

        def listdir(path="."):
            rec.reading(path)
            return real_listdir(path)

        def scandir(path="."):
            rec.reading(path)
            return real_scandir(path)

        for obj, name, fn in ((builtins, "open", open_), (io, "open", open_), (os, "open", os_open),
                              (os, "mkdir", mkdir), (os, "rename", moved(real_rename)),
                              (os, "replace", moved(real_replace)), (os, "listdir", listdir),
                              (os, "scandir", scandir)):
            self.patches.set(obj, name, fn)

    def uninstall(self) -> None:
        self.patches.undo()
