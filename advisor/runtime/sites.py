"""Where a call came from: the user's code, or a library (advisor, torch, the standard library,
an installed package). The runner records call sites with it; the defer-syncs fix asks whether a
caller is the user's own code."""

from __future__ import annotations

import os
import sys
import sysconfig

ADVISOR_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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
