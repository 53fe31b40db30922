"""What may have escaped the Python hooks: files of the user's tree changed while a process that
ran with the hooks alone was running.

Without a copy-on-write view (runner/jail.py), native code and subprocesses other than
multiprocessing's write past the hooks. Nothing else writes the user's tree while the processes
after the baseline run (the baseline has ended; every other process is sandboxed), so a file in
the script's directories whose modification time falls inside such a process's life is listed
in its child.json ``sandbox.unredirected``: written by something the hooks could not turn away
(or by the user, meanwhile). The walk is bounded; the run directory and bytecode caches are
skipped.
"""

from __future__ import annotations

import os

MAX_ENTRIES = 20000   # directory entries looked at per process: a huge tree is sampled, not walked
LIST_MAX = 200


def watched_dirs(spec: dict) -> list[str]:
    """The user's working directory and the script's, the shallower first, nested ones once."""
    dirs = []
    for d in (spec.get("cwd"), os.path.dirname(os.path.abspath(spec.get("script") or ""))):
        if d and os.path.isdir(d):
            d = os.path.realpath(d)
            if not any(d == o or d.startswith(o + os.sep) for o in dirs):
                dirs = [o for o in dirs if not o.startswith(d + os.sep)] + [d]
    return dirs


def changed_since(dirs: list[str], since: float, skip: tuple[str, ...] = ()) -> tuple[list[str], bool]:
    """(files under ``dirs`` modified at or after ``since`` (time.time()), sorted; whether the walk
    stopped at MAX_ENTRIES). ``skip``: directories not looked into (the run directory)."""
    skip = tuple(os.path.realpath(s) for s in skip)
    out, seen, cut = [], 0, False
    for root in dirs:
        for top, names, files in os.walk(root):
            names[:] = [n for n in names if n != "__pycache__" and not _under(os.path.join(top, n), skip)]
            for name in files:
                seen += 1
                if seen > MAX_ENTRIES:
                    return sorted(out), True
                path = os.path.join(top, name)
                try:
                    if os.lstat(path).st_mtime >= since:
                        out.append(path)
                except OSError:
                    continue
    return sorted(out), cut


def _under(path: str, dirs: tuple[str, ...]) -> bool:
    real = os.path.realpath(path)
    return any(real == d or real.startswith(d + os.sep) for d in dirs)


def note_escapes(result: dict, spec: dict, since: float) -> None:
    """child.json ``sandbox.unredirected`` (and ``unredirected_cut`` when the walk was bounded)
    for a process that ran with the Python hooks alone."""
    sb = result.get("sandbox")
    if not spec.get("sandbox_writes") or not isinstance(sb, dict) or sb.get("kind") != "python":
        return
    if spec.get("own_profiler"):   # its traces are let through where the script asks: not an escape
        return
    skip = tuple(p for p in (spec.get("sandbox_root"), spec.get("run_dir")) if p)
    changed, cut = changed_since(watched_dirs(spec), since, skip)
    sb["unredirected"] = changed[:LIST_MAX]
    if cut:
        sb["unredirected_cut"] = True
