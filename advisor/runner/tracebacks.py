"""Where the script's process failed, read from its exception's traceback in the child (the
frames are gone once it exits): child.json ``exit.failure`` (docs/trials.md, "Failed trials").

Each frame of the traceback belongs to the script (the user's own files), to a library (torch,
the standard library, an installed package), or to advisor. advisor's frames are of two sorts:

- pass-through: a wrapper that calls the function it stands in for (the sandbox's ``open``,
  the observer's hooks, a fix's ``forward`` under autocast). An exception raised in that call
  is the callee's, as under plain python;
- its own: any other advisor line, advisor's own logic, or a call advisor makes that the script
  did not (a fix converting the model through the model's own ``.to()``).

The failure is advisor's when one of advisor's own frames is on the stack below the script's
first frame (advisor raised, or made the call that raised); the environment's when it ran out of
memory; else the script's own error, placed at the script's innermost frame. No torch here.
"""

from __future__ import annotations

import ast
import linecache
import os
import re
import sys
import types

from advisor.runner._util import one_line_exception
from advisor.runtime.sites import ADVISOR_DIR, SiteFinder

MAX_FRAMES = 12      # of the traceback kept in child.json: the innermost ones
_ADVISOR = os.path.realpath(ADVISOR_DIR) + os.sep
_ROOT = os.path.dirname(os.path.realpath(ADVISOR_DIR))
# what an exhausted device or host raises: the process ran out of memory, not into a bug
_OOM_TYPES = ("OutOfMemoryError", "MemoryError")
_OOM_TEXT = ("out of memory",)   # "CUDA out of memory", "CUDA error: out of memory"


def describe(exc: BaseException, cwd: str | None = None) -> dict:
    """child.json ``exit.failure`` for the script's uncaught exception (a SystemExit with a
    non-zero code included): {kind, exception, message, where, line, traceback, and for an
    advisor failure the script's innermost frame under advisor's: ``script_where``,
    ``script_line``}. An exception a DataLoader worker raised is read from the worker's
    traceback, which torch passes on as text."""
    finder = SiteFinder(cwd or os.getcwd())
    entries = _entries(exc, finder)
    worker = _worker_entries(exc, finder)
    if worker is not None:
        entries = [*entries, *worker[0]]
    # advisor's frames before the script's first one are the bootstrap's: the script ran in them
    first = next((i for i, e in enumerate(entries) if not e.owner.startswith("advisor")), len(entries))
    entries = [e for e in entries[first:] if e.owner != "advisor-pass"]
    name, msg = (worker[1], worker[2]) if worker is not None else (type(exc).__name__, _message(exc))
    out: dict = {"exception": name, "message": msg}
    own = [i for i, e in enumerate(entries) if e.owner == "advisor"]
    script = [i for i, e in enumerate(entries) if e.owner == "script"]
    blame: int | None
    if own or not entries:
        out["kind"] = "advisor"
        blame = own[-1] if own else None
        if script and (blame is None or script[-1] > blame):   # the script's code that advisor's called
            out["script_where"], out["script_line"] = entries[script[-1]].where, entries[script[-1]].line
    else:
        oom = name in _OOM_TYPES or any(t in msg for t in _OOM_TEXT)
        out["kind"] = "environment" if oom else "script"
        blame = script[-1] if script else len(entries) - 1
    if blame is not None:
        out["where"], out["line"] = entries[blame].where, entries[blame].line
    out["traceback"] = [f"{e.where}: {e.line}" if e.line else e.where for e in entries][-MAX_FRAMES:]
    return out


class _Entry:
    """One frame of the traceback: its owner (_owner), "path:LINE" and source line."""

    __slots__ = ("owner", "where", "line")

    def __init__(self, owner: str, where: str, line: str):
        self.owner, self.where, self.line = owner, where, line


def _entries(exc: BaseException, finder: SiteFinder) -> list[_Entry]:
    """The traceback's frames, outermost first."""
    raw = []
    tb = exc.__traceback__
    while tb is not None:
        pos = None
        try:   # the position of the instruction in progress (python 3.11+)
            pos = next(p for i, p in enumerate(tb.tb_frame.f_code.co_positions()) if i == tb.tb_lasti // 2)
        except (AttributeError, StopIteration, ValueError):   # python 3.10: its line alone
            pass
        raw.append((tb.tb_frame, tb.tb_lineno, pos))
        tb = tb.tb_next
    out = []
    inner_passes = False   # the frame entered next was one of advisor's wrappers passing the call on
    for k in range(len(raw) - 1, -1, -1):   # innermost first: a wrapper calling a wrapper
        frame, lineno, pos = raw[k]
        nxt = raw[k + 1][0] if k + 1 < len(raw) else None
        name = frame.f_code.co_filename
        owner = _owner(name, finder)
        if owner == "advisor" and not name.startswith("<") and passes_through(frame, lineno, pos, nxt, inner_passes):
            owner = "advisor-pass"
        inner_passes = owner == "advisor-pass"
        out.append(_Entry(owner, _display(name, lineno, finder), linecache.getline(name, lineno).strip()))
    out.reverse()
    return out


_WORKER = re.compile(r'File "([^"]+)", line (\d+), in [^\n]*\n(?:    ([^\n]*)\n)?')


def _worker_entries(exc: BaseException, finder: SiteFinder) -> tuple[list[_Entry], str, str] | None:
    """(frames, exception type, message) of the traceback a DataLoader worker sent as text
    (torch's ExceptionWrapper: "Caught X in DataLoader worker process 0. Original Traceback
    ..."), its frames as _entries gives them (no pass-through can be told from text: an advisor
    frame there counts only where it is the innermost, where advisor's own line raised); None
    for any other exception."""
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001
        return None
    head, sep, rest = text.partition("Original Traceback (most recent call last):\n")
    if not sep or not head.startswith("Caught "):
        return None
    out = []
    for m in _WORKER.finditer(rest):
        owner = _owner(m.group(1), finder)
        out.append(_Entry(owner, _display(m.group(1), int(m.group(2)), finder), (m.group(3) or "").strip()))
    for e in out[:-1]:
        if e.owner == "advisor":
            e.owner = "advisor-pass"
    last = rest.rstrip().splitlines()[-1] if rest.strip() else ""
    name, _, msg = last.partition(": ")
    return out, (name.strip() or type(exc).__name__), msg.strip()


def _owner(name: str, finder: SiteFinder) -> str:
    """"script", "library" or "advisor" (its package, or a fix's source text executed as the
    patch ships it: "<advisor ...>"); _entries tells advisor's pass-through wrappers apart."""
    if name.startswith("<advisor") or (not name.startswith("<") and os.path.realpath(name).startswith(_ADVISOR)):
        return "advisor"
    return "script" if finder.is_script_code(name) else "library"


def _display(name: str, lineno: int, finder: SiteFinder) -> str:
    """A frame's "path:LINE": the script's relative to its cwd, advisor's from its package, a
    library's from the sys.path entry it was imported from (``torch/nn/modules/module.py``)."""
    if name.startswith("<"):   # <advisor amp>, <string>: no file
        return f"{name}:{lineno}"
    real = os.path.realpath(name)
    if real.startswith(_ADVISOR):
        return f"{os.path.relpath(real, _ROOT)}:{lineno}"
    shown = finder.display(name)
    if os.path.isabs(shown) and not finder.is_script_code(name):
        roots = [r for r in (os.path.realpath(p) + os.sep for p in sys.path if p) if real.startswith(r)]
        if roots:
            shown = real[len(max(roots, key=len)):]
    return f"{shown}:{lineno}"


def _message(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return f"exit code {exc.code}"
    text = one_line_exception(exc)
    name = type(exc).__name__
    return text[len(name) + 2:] if text.startswith(name + ": ") else ("" if text == name else text)


def passes_through(frame: types.FrameType, lineno: int, pos, nxt: types.FrameType | None,
                   inner_passes: bool = False) -> bool:
    """Whether the call in progress on this advisor line is a call of what it wraps: a plain
    name bound in the frame (a local, or a closure's: ``real_open(...)``, ``orig(*a, **k)``)
    to a builtin, or to a function that is the frame entered next and is not advisor's, or is
    another of advisor's wrappers that passed the call on itself (``inner_passes``: the
    sandbox's open wrapping the observer's, which wraps the builtin)."""
    call = _call_in_progress(frame, lineno, pos)
    if call is None or not isinstance(call.func, ast.Name):
        return False
    try:
        target = frame.f_locals.get(call.func.id)
    except Exception:  # noqa: BLE001 - a frame's locals never break the report of its failure
        return False
    if target is None:
        return False
    if _is_builtin(target):   # open, os.open: what raised is the call it wraps
        return True
    code = getattr(getattr(target, "__func__", target), "__code__", None)
    # a callable object; a frame entered that is another's (an argument's); none entered: the
    # call failed as it bound advisor's arguments (an option the wrapped function lacks)
    if code is None or nxt is None or nxt.f_code is not code:
        return False
    return inner_passes or not os.path.realpath(code.co_filename).startswith(_ADVISOR)


def _is_builtin(obj) -> bool:
    return isinstance(obj, (types.BuiltinFunctionType, types.BuiltinMethodType, types.MethodWrapperType,
                            types.WrapperDescriptorType, types.MethodDescriptorType))


def _call_in_progress(frame: types.FrameType, lineno: int, pos) -> ast.Call | None:
    """The call expression the frame is in: the instruction's position where python records
    it (3.11+), else the only call on the line; None where it cannot be told."""
    name = frame.f_code.co_filename
    if pos is not None and None not in pos:
        start, end, col, end_col = pos   # columns count UTF-8 bytes
        lines = [linecache.getline(name, n).encode() for n in range(start, end + 1)]
        if not all(lines):
            return None
        text = lines[0][col:end_col] if start == end else lines[0][col:] + b"".join(lines[1:-1]) + lines[-1][:end_col]
        try:
            node = ast.parse(text.decode(errors="replace").strip(), mode="eval").body
        except SyntaxError:
            return None
        return node if isinstance(node, ast.Call) else None
    source = linecache.getline(name, lineno).strip()
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    return calls[0] if len(calls) == 1 else None


def at_exit(exc: BaseException | None) -> dict | None:
    """The failure of a script that ended by itself with ``exc``: None where it did not fail
    (no exception, exit code 0, a KeyboardInterrupt)."""
    if exc is None or isinstance(exc, KeyboardInterrupt):
        return None
    if isinstance(exc, SystemExit) and exc.code in (None, 0):
        return None
    try:
        return describe(exc)
    except Exception as e:  # noqa: BLE001 - describing a failure must never add one
        print(f"advisor: could not read the script's traceback: {one_line_exception(e)}", file=sys.stderr)
        return None
