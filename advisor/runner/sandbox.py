"""Trials must not clobber the user's files: the script's own writes go to the run directory.

Installed in trial children only (spec ``sandbox_writes``). Files the script opens for
writing (``open``/``io.open``/``Path.open`` with w, a, x or +; ``torch.save`` to a path) are
redirected to ``<run_dir>/outputs/<the path, made relative>`` when they lie in the script's
project (its directory or the working directory), or anywhere outside the system temp
directory unless an installed library (site-packages, the standard library) writes them there
for itself, as torch.compile fills ~/.triton; ``torch.save`` is redirected whoever calls it.
Advisor's own outputs (the run dir, tb/) are left alone, and so is scratch space in the temp
directory that is not the project (datasets unpacked by the script, say).
Directories made for them (``os.makedirs``, ``Path.mkdir``) go there too, and a later read of
a redirected file reads the redirected copy. Each redirected path is noted once.
"""

from __future__ import annotations

import builtins
import functools
import io
import os
import pathlib
import sys
import sysconfig
import tempfile

_WRITE_CHARS = set("wax+")


@functools.lru_cache(maxsize=1)
def _library_roots() -> tuple[str, ...]:
    """Where installed code lives; asked on every redirected-path check, computed once."""
    paths = sysconfig.get_paths()
    roots = {paths.get("purelib"), paths.get("platlib"), sys.prefix, sys.base_prefix, sys.exec_prefix}
    return tuple(os.path.realpath(r) for r in roots if r)


class Sandbox:
    def __init__(self, run_dir: str, note, also_allowed: tuple[str, ...] = (), project: tuple[str, ...] = ()):
        self.root = os.path.realpath(run_dir)
        self.out = os.path.join(self.root, "outputs")
        self.own = [self.root, "/dev", "/proc", *(os.path.realpath(a) for a in also_allowed)]
        self.project = [os.path.realpath(p) for p in project]
        self.scratch = os.path.realpath(tempfile.gettempdir())
        self.note = note
        self.redirected: dict[str, str] = {}

    def allow(self, path, make: bool = False) -> None:
        """Writes under `path` go where asked (the script's own profiler traces); `make`: the
        directory is made now, as the script's code would (os.makedirs recursing into a
        parent would otherwise be redirected, and the write under it find no directory)."""
        full = self._real(path)
        if full is None:
            return
        self.own.append(full)
        if make:  # one os.mkdir a level: os.makedirs recurses through the redirecting os.makedirs
            missing = []
            while full and not os.path.isdir(full) and full != os.path.dirname(full):
                missing.append(full)
                full = os.path.dirname(full)
            for d in reversed(missing):
                os.mkdir(d)

    def relocate(self, run_dir: str) -> None:
        """The run directory was renamed (a process started ahead takes its trial's name)."""
        old, self.root = self.root, os.path.realpath(run_dir)
        self.out = os.path.join(self.root, "outputs")
        self.own[0] = self.root
        self.redirected = {k: self.root + v[len(old):] if v.startswith(old + os.sep) else v
                           for k, v in self.redirected.items()}

    @staticmethod
    def _under(path: str, dirs) -> bool:
        return any(path == d or path.startswith(d + os.sep) for d in dirs)

    @staticmethod
    def _real(path) -> str | None:
        if isinstance(path, int):
            return None  # a file descriptor the script already holds
        try:
            p = os.fspath(path)
        except TypeError:
            return None
        return os.path.realpath(os.fsdecode(p) if isinstance(p, bytes) else p)

    def read_target(self, path):
        full = self._real(path)
        return self.redirected.get(full, path) if full else path

    def target(self, path, force: bool = False) -> str | None:
        """Where a write to `path` really goes, or None when it may go where asked."""
        full = self._real(path)
        if full is None or self._under(full, self.own):
            return None
        if self._under(full, [self.scratch]) and not self._under(full, self.project):
            return None
        if not force and not self._under(full, self.project) and self._called_from_library():
            # An installed library's own cache outside the project (~/.triton, written by
            # torch.compile): redirecting half of a library's files broke compilation.
            return None
        p = os.fspath(path)
        dest = os.path.join(self.out, full.lstrip(os.sep))
        if full not in self.redirected:
            self.redirected[full] = dest
            self.note(f"trial write redirected: {p} -> {os.path.relpath(dest, self.root)}")
        return dest

    def _called_from_library(self) -> bool:
        """Is the nearest caller outside this module an installed package or the standard
        library? The user's own code, in the project or beside it, is not."""
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename == __file__:
            frame = frame.f_back
        if frame is None:
            return False
        name = frame.f_code.co_filename
        if name.startswith("<frozen"):  # "<frozen os>": os.makedirs recursing for a caller
            return True                 # already judged when it called os.makedirs
        path = os.path.realpath(name)
        return self._under(path, _library_roots()) and not self._under(path, self.project)

    def install(self) -> None:
        sb = self
        real_open = builtins.open

        def open_(file, mode="r", *args, **kwargs):
            if _WRITE_CHARS & set(str(mode)):
                dest = sb.target(file)
                if dest is not None:
                    os.makedirs(os.path.dirname(dest), exist_ok=True)
                    file = dest
            elif sb.redirected:
                file = sb.read_target(file)
            return real_open(file, mode, *args, **kwargs)

        builtins.open = open_
        io.open = open_

        real_makedirs = os.makedirs

        def makedirs(name, *args, **kwargs):
            dest = sb.target(name)
            return real_makedirs(dest if dest is not None else name, *args, **kwargs)

        os.makedirs = makedirs

        real_mkdir = pathlib.Path.mkdir

        def mkdir(self, *args, **kwargs):
            dest = sb.target(self)
            if dest is None:
                return real_mkdir(self, *args, **kwargs)
            real_makedirs(dest, exist_ok=True)

        pathlib.Path.mkdir = mkdir

        def path_open(self, mode="r", *args, **kwargs):
            return open_(self, mode, *args, **kwargs)

        pathlib.Path.open = path_open
        self._patch_torch_save()

    def _patch_torch_save(self) -> None:
        import torch

        real_save = torch.save
        sb = self

        def save(obj, f, *args, **kwargs):
            if isinstance(f, (str, bytes, os.PathLike)):
                dest = sb.target(f, force=True)  # checkpoints: whoever saves them
                if dest is not None:
                    os.makedirs(os.path.dirname(dest), exist_ok=True)
                    f = dest
            return real_save(obj, f, *args, **kwargs)

        torch.save = save
