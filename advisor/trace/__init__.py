"""Load Kineto traces into one columnar model (docs/internals.md §2).

    load_trace(path)  -> TraceModel    file (.json / .json.gz), run directory or TensorBoard
                                       log dir (the newest *.pt.trace.json[.gz] under it)
    load_traces(path) -> list[TraceModel]   every trace under a directory, oldest first
"""

from __future__ import annotations

import os
from pathlib import Path

from advisor.trace.classify import CLASSES
from advisor.trace.load import TraceError, parse_file
from advisor.trace.model import Table, TraceModel, build_model, detect_steps

__all__ = ["load_trace", "load_traces", "find_trace_files", "TraceModel", "TraceError", "Table",
           "CLASSES", "detect_steps"]

_SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz")


def find_trace_files(path: str | os.PathLike) -> list[Path]:
    """Trace files for a path: the file itself, or every *.pt.trace.json[.gz] below a
    directory (a run directory's tb/ is searched the same way), oldest first."""
    p = Path(path)
    if not p.exists():
        raise TraceError(f"{p}: no such file or directory")
    if p.is_file():
        return [p]
    found = [f for f in p.rglob("*") if f.is_file() and f.name.endswith(_SUFFIXES)]
    if not found:
        raise TraceError(f"{p}: no *.pt.trace.json or *.pt.trace.json.gz under this directory")
    # mtime first; the name (which embeds time_ns in TensorBoard layout) breaks ties.
    return sorted(found, key=lambda f: (f.stat().st_mtime_ns, f.name))


def _load_file(f: Path) -> TraceModel:
    sink, meta = parse_file(str(f))
    return build_model(sink, meta, str(f))


def load_trace(path: str | os.PathLike) -> TraceModel:
    """Parse one trace (the newest one when path is a directory)."""
    return _load_file(find_trace_files(path)[-1])


def load_traces(path: str | os.PathLike) -> list[TraceModel]:
    """Parse every trace under path (a single file gives a one-element list)."""
    return [_load_file(f) for f in find_trace_files(path)]
