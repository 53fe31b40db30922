"""What compiling a trial's graphs costs a run that finds no cache, where the trial found one.

The processes of an analyze share torch.compile's caches (specs.compile_cache_env, --cache DIR),
so a graph is compiled once and loaded by every later process that builds it: the analyze is
faster, but the loading process's lead-in then shows the load, not the compile the user's first
run of fixes.patch will pay. The book, beside the caches (``BOOK``), keeps the compile seconds
of the process that compiled each stack's graphs; a process that loaded them all takes them
from it as ``compile_cold_s``, and measure.lead_in_s counts that instead of the load, as it
counts the computing of samples a process loaded from the samples cache. A --cache DIR keeps
the book with the graphs, so a later analyze's trials are costed as the first analyze's were.

A stack's graphs are known by the script, its arguments and the stack's fixes that change the
model's program: those that feed data (Fix.feeds_data) or leave torch.compile's graphs as they
are (Fix.same_graphs: cudnn.benchmark, a cached batch) do not.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path

from advisor import fixes, measure, specs
from advisor.runner._util import write_json_atomic

BOOK = "advisor-compiles.json"
_lock = threading.Lock()   # the slots of trials side by side settle from their own threads


def book_path(spec: dict) -> Path | None:
    """The book beside the compile cache advisor gave the spec's process: the run's
    (specs.compile_cache_env) or --cache DIR (specs.use_cache_dir); None where the process used
    the user's own cache, beside which advisor writes nothing."""
    inductor = (spec.get("environ") or {}).get("TORCHINDUCTOR_CACHE_DIR")
    if inductor:
        return Path(inductor).parent / BOOK
    own = os.environ.get(specs.COMPILE_CACHE_ENV)
    return Path(own) / BOOK if own else None


def graphs_key(spec: dict) -> str:
    """The stack's graphs: the script, its arguments, and its fixes that change the program."""
    program = sorted(json.dumps([i.get("name"), i.get("params") or {}], sort_keys=True, default=str)
                     for i in spec.get("interventions") or []
                     if not fixes.trait(i.get("name"), "feeds_data") and not fixes.trait(i.get("name"), "same_graphs"))
    doc = json.dumps([spec.get("script"), (spec.get("argv") or [])[1:], program], default=str)
    return hashlib.sha256(doc.encode()).hexdigest()[:20]


def settle(child: dict, spec: dict) -> None:
    """After a trial process: a process that compiled its stack's graphs (a cache miss) writes
    what that took; one that loaded them all gets ``compile_cold_s`` from the book, when a
    process compiled them before (in this analyze, or one before it on the same --cache)."""
    took, use, path = child.get("compile_s"), child.get("compile_cache") or {}, book_path(spec)
    if not isinstance(took, (int, float)) or took <= 0 or path is None:
        return
    # its own time, as its lead-in counts it: a guess compiling niced beside another trial's
    # start-up waited for cores, and every process that loads the graphs would be charged that
    own = float(took) * measure.own_share(child)
    key = graphs_key(spec)
    with _lock:
        book = _read(path)
        if use.get("misses"):
            if key not in book:
                book[key] = round(own, 3)
                _write(path, book)
        elif use.get("hits") and isinstance(book.get(key), (int, float)) and book[key] > own:
            child["compile_cold_s"] = book[key]


def _read(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text())
        return doc if isinstance(doc, dict) else {}
    except (OSError, ValueError):
        return {}


def _write(path: Path, book: dict) -> None:
    try:
        write_json_atomic(str(path), book)
    except OSError:   # a read-only --cache DIR: the trials are costed as they ran
        pass
