"""The source of a running frame as ``ast`` nodes: the call the frame is making (its current
instruction's place, ``co_positions``), the function the frame runs, the assignments of a
name in it. Used by advisor.runtime.provenance inside the script's process; files are parsed
once each."""

from __future__ import annotations

import ast
import linecache
import sys

_TREES: dict[str, tuple[ast.Module, list[str]] | None] = {}
_MAX_FILE_CHARS = 2_000_000


def tree(filename: str) -> tuple[ast.Module, list[str]] | None:
    """(the module's tree, its lines) for a source file; None when it cannot be read or parsed."""
    if filename in _TREES:
        return _TREES[filename]
    got = None
    try:
        lines = linecache.getlines(filename)
        text = "".join(lines)
        if text and len(text) <= _MAX_FILE_CHARS:
            got = (ast.parse(text, filename), [ln.rstrip("\n") for ln in lines])
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        got = None
    _TREES[filename] = got
    return got


def char_col(lines: list[str], line: int, byte_col: int) -> int:
    """ast's column (UTF-8 bytes) as a column in characters (libcst's)."""
    try:
        return len(lines[line - 1].encode("utf-8")[:byte_col].decode("utf-8", "ignore"))
    except IndexError:
        return byte_col


def span(node: ast.AST, lines: list[str]) -> list[int]:
    """[line, col, end_line, end_col], columns in characters."""
    return [node.lineno, char_col(lines, node.lineno, node.col_offset),
            node.end_lineno or node.lineno, char_col(lines, node.end_lineno or node.lineno, node.end_col_offset or 0)]


def code(node: ast.AST) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # noqa: BLE001
        return "?"


def _position(frame) -> tuple[int, int, int, int] | None:
    """(line, end_line, col, end_col) of the frame's current instruction (Python 3.11+)."""
    try:
        positions = list(frame.f_code.co_positions())
        got = positions[frame.f_lasti // 2]
    except (AttributeError, IndexError, ValueError):
        return None
    return got if got and None not in got else None


def current_call(frame, want=None) -> ast.Call | None:
    """The call the frame is making now: the ``ast.Call`` at its current instruction; else the
    innermost call on its line (``want``: a predicate on the call, for that guess)."""
    got = tree(frame.f_code.co_filename)
    if got is None:
        return None
    mod, _lines = got
    pos = _position(frame)
    line = frame.f_lineno
    calls = [n for n in ast.walk(mod) if isinstance(n, ast.Call) and
             n.lineno <= line <= (n.end_lineno or n.lineno)]
    if pos is not None:
        lo, hi, col, end_col = pos
        for n in calls:
            if (n.lineno, n.end_lineno, n.col_offset, n.end_col_offset) == (lo, hi, col, end_col):
                return n
    if want is not None:
        calls = [n for n in calls if want(n)]
    calls.sort(key=lambda n: ((n.end_lineno or n.lineno) - n.lineno, (n.end_col_offset or 0) - n.col_offset))
    return calls[0] if calls else None


def function_of(frame) -> ast.AST | None:
    """The def (or lambda, or the module) whose code the frame runs."""
    got = tree(frame.f_code.co_filename)
    if got is None:
        return None
    mod, _ = got
    co = frame.f_code
    if co.co_name == "<module>":
        return mod
    best = None
    for n in ast.walk(mod):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == co.co_name:
            first = min([n.lineno, *(d.lineno for d in n.decorator_list)])
            if first == co.co_firstlineno or n.lineno == co.co_firstlineno:
                return n
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and \
                n.lineno <= frame.f_lineno <= (n.end_lineno or n.lineno):
            if best is None or n.lineno >= best.lineno:
                best = n
    return best or mod


def parents(root: ast.AST) -> dict[ast.AST, ast.AST]:
    out = {}
    for n in ast.walk(root):
        for c in ast.iter_child_nodes(n):
            out[c] = n
    return out


def own_nodes(fn: ast.AST):
    """The nodes of ``fn``'s own body, not those of functions or classes defined in it."""
    body = fn.body if isinstance(fn, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef)) else [fn.body]
    stack = list(body)
    while stack:
        n = stack.pop()
        yield n
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        stack.extend(ast.iter_child_nodes(n))


def assignments(fn: ast.AST, name: str, before: int | None = None) -> list[ast.AST]:
    """The statements of ``fn`` that bind ``name`` (``=``, ``+=``, an annotated assignment, a
    ``for``/``with`` target, a walrus), before line ``before``, in line order."""
    out = []
    for n in own_nodes(fn):
        targets = []
        if isinstance(n, ast.Assign):
            targets = n.targets
        elif isinstance(n, (ast.AugAssign, ast.AnnAssign)) and (not isinstance(n, ast.AnnAssign) or n.value is not None):
            targets = [n.target]
        elif isinstance(n, (ast.For, ast.AsyncFor)):
            targets = [n.target]
        elif isinstance(n, (ast.With, ast.AsyncWith)):
            targets = [i.optional_vars for i in n.items if i.optional_vars is not None]
        elif isinstance(n, ast.NamedExpr):
            targets = [n.target]
        if any(isinstance(t, ast.Name) and t.id == name for tt in targets for t in ast.walk(tt)) and \
                (before is None or n.lineno < before):
            out.append(n)
    return sorted(out, key=lambda n: (n.lineno, n.col_offset))


def params(fn: ast.AST) -> dict[str, ast.AST | None]:
    """{parameter: its default expression or None} of a def."""
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        return {}
    a = fn.args
    positional = [*a.posonlyargs, *a.args]
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    out = {p.arg: d for p, d in zip(positional, defaults)}
    out.update({p.arg: d for p, d in zip(a.kwonlyargs, a.kw_defaults)})
    return out


def module_of_file(filename: str):
    """The imported module whose file this is, or None."""
    for mod in list(sys.modules.values()):
        if getattr(mod, "__file__", None) == filename:
            return mod
    return None
