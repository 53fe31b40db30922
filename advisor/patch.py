"""Accepted fixes → the equivalent edit of the user's script, as one unified diff.

Trials apply fixes at run time (advisor.interventions) and never touch the user's files.
This module writes the source edit a user would make by hand, at the call sites the child
observed (config ``where``, internals.md §1), and returns it as text that ``git apply``
and ``patch -p1`` accept from the directory holding the script (or from ``root``):

    diff, notes = make_patch("train.py", [{"intervention": "set-to-none", "params": {}}], config)

Edits are made on a libcst tree, so formatting and comments survive. Every fix is first
resolved against the ORIGINAL tree (line numbers → nodes via PositionProvider) and
recorded as an edit of an original node; one transformer pass then applies all of them,
so several fixes on one file (even on one call) compose into one diff whatever their
order. Nothing is written: files are read, the diff is returned.

Each note is {"intervention", "applied": True, "where": "path:LINE", "edits": [...]} or
{"intervention", "applied": False, "reason": ...}; a fix that cannot be placed (unknown
intervention, site not observed, site not in an editable file, nothing to change) is
reported, never raised.
"""

from __future__ import annotations

import ast
import difflib
import os
from dataclasses import dataclass, field
from typing import Callable

import warnings

with warnings.catch_warnings():     # libcst.metadata imports a deprecated mypy_extensions.TypedDict
    warnings.simplefilter("ignore", DeprecationWarning)
    import libcst as cst
    from libcst.metadata import MetadataWrapper, ParentNodeProvider, PositionProvider

LR_COMMENT = "# advisor: scale the learning rate with the batch"

# Where a fix's own "where" (from the rule) may stand in for a config site the child did not record.
_FIX_WHERE_KEY = {
    "set-to-none": "zero_grad", "fused-optimizer": "optimizer", "cudnn-benchmark": "cudnn.benchmark",
    "dataloader-workers": "dataloader", "pin-memory": "dataloader", "batch-size": "dataloader",
    "channels-last": "input", "torch-compile": "parameters",
}

# Order of statements inserted at one anchor.
_P_IMPORT, _P_CUDNN, _P_TF32, _P_CHANNELS_LAST, _P_COMPILE, _P_INPUT = 0, 10, 20, 30, 40, 50

# DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn, pin_memory, ...)
_DL_POS = {"batch_size": 1, "num_workers": 5, "pin_memory": 7}

_FUSED_OPTIMIZERS = {"SGD", "Adam", "AdamW", "Adagrad"}
_FOREACH_OPTIMIZERS = _FUSED_OPTIMIZERS | {"RMSprop", "Adamax", "NAdam", "RAdam", "Adadelta", "ASGD", "Rprop"}


class _Skip(Exception):
    """The fix cannot be placed; the message is the note's reason."""


# ----------------------------------------------------------------------------- public API

def make_patch(script_path: str, fixes: list[dict], config: dict, root: str | None = None,
               *, cwd: str | None = None) -> tuple[str, list[dict]]:
    """Return (unified diff, one note per fix). ``config`` is the child's observed config;
    its ``where`` paths are resolved against ``cwd`` (default: the current directory), the
    script's directory and ``root`` (default: the script's directory; diff paths are
    relative to it)."""
    cwd = os.path.realpath(cwd or os.getcwd())
    script = os.path.realpath(os.path.join(cwd, script_path))
    root = os.path.realpath(os.path.join(cwd, root)) if root else os.path.dirname(script)
    ctx = _Context(script=script, root=root, cwd=cwd, config=config or {})
    notes: list[dict] = []
    for fix in fixes or []:
        name = (fix or {}).get("intervention")
        params = dict((fix or {}).get("params") or {})
        handler = _HANDLERS.get(name)
        if handler is None:
            notes.append({"intervention": name, "applied": False,
                          "reason": f"advisor has no source edit for {name!r}"})
            continue
        mark = ctx.begin(name)
        try:
            note = handler(ctx, fix, params)
        except _Skip as e:
            ctx.rollback(mark)
            note = {"applied": False, "reason": str(e)}
        except Exception as e:  # noqa: BLE001 - a bad site must not take the whole patch down
            ctx.rollback(mark)
            note = {"applied": False, "reason": f"internal error while placing the edit: {type(e).__name__}: {e}"}
        notes.append({"intervention": name, **note})
    return ctx.render(notes), notes


patch_for = make_patch


# ----------------------------------------------------------------------------- parsed files

@dataclass
class _File:
    path: str
    rel: str
    text: str
    encoding: str
    module: cst.Module
    pos: dict
    parent: dict
    calls: list = field(default_factory=list)       # (Call, start_line, end_line)
    stmts: list = field(default_factory=list)       # (statement, start_line, end_line)

    def line_of(self, node) -> int:
        return self.pos[node].start.line

    def calls_at(self, line: int, pred: Callable[[cst.Call], bool]) -> list[cst.Call]:
        hits = [(e - s, c) for c, s, e in self.calls if s <= line <= e and pred(c)]
        return [c for _, c in sorted(hits, key=lambda t: t[0])]   # innermost first

    def stmt_at(self, line: int):
        hits = [(e - s, st) for st, s, e in self.stmts if s <= line <= e]
        return min(hits, key=lambda t: t[0])[1] if hits else None

    def block_of(self, stmt) -> list:
        return list(self.parent[stmt].body)


def _parse(path: str, rel: str) -> _File:
    with open(path, "rb") as fh:
        raw = fh.read()
    module = cst.parse_module(raw)
    wrapper = MetadataWrapper(module)
    pos = wrapper.resolve(PositionProvider)
    parent = wrapper.resolve(ParentNodeProvider)
    module = wrapper.module
    f = _File(path=path, rel=rel, text=raw.decode(module.encoding), encoding=module.encoding,
              module=module, pos=pos, parent=parent)
    for node, rng in pos.items():
        if isinstance(node, cst.Call):
            f.calls.append((node, rng.start.line, rng.end.line))
        elif isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)) and \
                isinstance(parent.get(node), (cst.Module, cst.IndentedBlock)):
            f.stmts.append((node, rng.start.line, rng.end.line))
    return f


# ----------------------------------------------------------------------------- edits

@dataclass
class _Edit:
    kind: str          # "node" | "before" | "after" | "wrap" | "torch"
    file: _File
    node: object = None
    fn: Callable | None = None
    prio: int = 0
    stmt: object = None    # inserted statement ("before"/"after") or last wrapped statement ("wrap")
    key: str = ""          # for de-duplication
    blank: bool = False    # an inserted statement that wants a blank line above its group (after the imports)


@dataclass
class _Context:
    script: str
    root: str
    cwd: str
    config: dict
    files: dict = field(default_factory=dict)
    edits: list = field(default_factory=list)
    current: str = ""

    # --- transactions: a fix that is skipped leaves no edit behind
    def begin(self, name: str) -> int:
        self.current = name
        return len(self.edits)

    def rollback(self, mark: int) -> None:
        del self.edits[mark:]

    # --- files and sites
    def file(self, path: str) -> _File:
        path = os.path.realpath(path)
        if path not in self.files:
            rel = os.path.relpath(path, self.root)
            if rel.startswith(os.pardir + os.sep) or rel == os.pardir or os.path.isabs(rel):
                raise _Skip(f"{path} is outside {self.root}; not editing it")
            try:
                self.files[path] = _parse(path, rel.replace(os.sep, "/"))
            except (OSError, cst.ParserSyntaxError, UnicodeDecodeError) as e:
                raise _Skip(f"cannot parse {path}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
        return self.files[path]

    def script_file(self) -> _File:
        return self.file(self.script)

    def where(self, key: str, fix: dict) -> str | None:
        item = self.config.get(key)
        where = item.get("where") if isinstance(item, dict) else None
        if not where and _FIX_WHERE_KEY.get(fix.get("intervention")) == key:
            where = fix.get("where")
        return where or None

    def site(self, key: str, fix: dict, required: bool = True) -> tuple[_File, int] | None:
        """The (file, line) of a config site, or None / _Skip when it was not observed."""
        where = self.where(key, fix)
        if not where:
            if required:
                raise _Skip(f"no {key!r} site was observed in the run's config")
            return None
        path, _, line = str(where).rpartition(":")
        if not path or not line.strip().isdigit():
            raise _Skip(f"cannot read the {key!r} site {where!r}")
        resolved = self._resolve_path(path)
        if resolved is None:
            raise _Skip(f"the {key!r} site {where} is not a file found from {self.cwd} or {os.path.dirname(self.script)}")
        return self.file(resolved), int(line)

    def _resolve_path(self, path: str) -> str | None:
        if os.path.isabs(path):
            return path if os.path.isfile(path) else None
        norm = os.path.normpath(path)
        if not norm.startswith(os.pardir) and (self.script == norm or self.script.endswith(os.sep + norm)):
            return self.script
        for base in (self.cwd, os.path.dirname(self.script), self.root):
            cand = os.path.join(base, norm)
            if os.path.isfile(cand):
                return cand
        return None

    # --- recording edits
    def on_node(self, f: _File, node, fn: Callable) -> None:
        self.edits.append(_Edit("node", f, node=node, fn=fn))

    def insert(self, f: _File, anchor, code: str, *, after: bool, prio: int, blank: bool = False) -> None:
        key = f"{'after' if after else 'before'}:{id(anchor)}:{code}"
        if any(e.key == key for e in self.edits):
            return
        self.edits.append(_Edit("after" if after else "before", f, node=anchor,
                                stmt=cst.parse_statement(code), prio=prio, key=key, blank=blank))
        if "torch." in code:
            self.need_torch(f)

    def wrap(self, f: _File, first, last, fn: Callable) -> None:
        if any(e.kind == "wrap" and e.file is f and e.node is first for e in self.edits):
            raise _Skip("those statements are already wrapped by another fix")
        self.edits.append(_Edit("wrap", f, node=first, stmt=last, fn=fn))
        self.need_torch(f)

    def need_torch(self, f: _File) -> None:
        self.edits.append(_Edit("torch", f))

    def after_imports(self, f: _File, code: str, prio: int) -> None:
        anchor, after = _import_anchor(f)
        self.insert(f, anchor, code, after=after, prio=prio, blank=after)

    # --- output
    def render(self, notes: list[dict]) -> str:
        chunks = []
        for f in sorted(self.files.values(), key=lambda f: f.rel):
            edits = [e for e in self.edits if e.file is f]
            if not any(e.kind != "torch" for e in edits):
                continue
            if any(e.kind == "torch" for e in edits) and not _binds_torch(f.module):
                target = _torch_import_anchor(f)
                if target is not None:
                    anchor, after = target
                    edits.append(_Edit("after" if after else "before", f, node=anchor,
                                       stmt=cst.parse_statement("import torch"), prio=_P_IMPORT))
            new = f.module.visit(_Apply(edits)).code
            try:
                ast.parse(new)
            except SyntaxError as e:  # a bug here must not hand the user a broken file
                for n in notes:
                    if n.get("applied") and any(w.startswith(f.rel + ":") for w in n.get("edits_at", [])):
                        n.update(applied=False, reason=f"internal error: the edit does not parse ({e.msg})")
                continue
            if new != f.text:
                chunks.append(_unified(f.text, new, f.rel))
        for n in notes:
            n.pop("edits_at", None)
        return "".join(chunks)


def _unified(old: str, new: str, rel: str) -> str:
    out = []
    for line in difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                     fromfile=f"a/{rel}", tofile=f"b/{rel}"):
        if line.startswith(("---", "+++")):
            line = line.rstrip("\n") + "\n"      # difflib puts no newline issue here; keep one
        if not line.endswith("\n"):
            line += "\n\\ No newline at end of file\n"
        out.append(line)
    return "".join(out)


class _Apply(cst.CSTTransformer):
    """One pass applying every recorded edit, keyed by original node."""

    def __init__(self, edits: list[_Edit]):
        super().__init__()
        self.node_fns: dict = {}
        self.before: dict = {}
        self.after: dict = {}
        self.wraps: dict = {}
        for e in edits:
            if e.kind == "node":
                self.node_fns.setdefault(e.node, []).append(e.fn)
            elif e.kind in ("before", "after"):
                d = self.before if e.kind == "before" else self.after
                d.setdefault(e.node, []).append(e)
            elif e.kind == "wrap":
                self.wraps[e.node] = e
        for d in (self.before, self.after):
            for k, lst in d.items():
                lst = sorted(lst, key=lambda e: e.prio)   # stable: fix order within a priority
                stmts = [e.stmt for e in lst]
                blank = next((n for n, e in enumerate(lst) if e.blank), None)
                if blank is not None:
                    stmts[blank] = stmts[blank].with_changes(leading_lines=[cst.EmptyLine()])
                d[k] = stmts

    def on_leave(self, original_node, updated_node):
        updated_node = super().on_leave(original_node, updated_node)
        for fn in self.node_fns.get(original_node, ()):
            updated_node = fn(updated_node)
        if isinstance(original_node, (cst.Module, cst.IndentedBlock)) and isinstance(updated_node, type(original_node)):
            updated_node = updated_node.with_changes(body=self._block(list(original_node.body), list(updated_node.body)))
        return updated_node

    def _block(self, orig: list, new: list) -> list:
        out: list = []
        i = 0
        while i < len(orig):
            o = orig[i]
            w = self.wraps.get(o)
            if w is not None and w.stmt in orig[i:]:
                j = i + next(k for k, s in enumerate(orig[i:]) if s is w.stmt)
                inner: list = []
                for k in range(i, j + 1):
                    if k > i:
                        inner.extend(self.before.get(orig[k], ()))
                    inner.append(new[k])
                    inner.extend(self.after.get(orig[k], ()))
                lead = inner[0].leading_lines
                inner[0] = inner[0].with_changes(leading_lines=())
                out.extend(self._with_lead(self.before.get(o, []), w.fn(inner), lead))
                i = j + 1
                continue
            out.extend(self._with_lead(self.before.get(o, []), new[i], new[i].leading_lines, strip=True))
            out.extend(self.after.get(o, ()))
            i += 1
        return out

    @staticmethod
    def _with_lead(before: list, stmt, lead, strip: bool = False) -> list:
        """Statements inserted before ``stmt`` take over its leading comments and blank lines."""
        if not before:
            return [stmt.with_changes(leading_lines=lead)] if not strip else [stmt]
        first = before[0].with_changes(leading_lines=lead)
        return [first, *before[1:], stmt.with_changes(leading_lines=())]


# ----------------------------------------------------------------------------- CST helpers

def _code(node) -> str:
    return cst.Module(body=[]).code_for_node(node)


def _dotted(expr) -> str | None:
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.Attribute):
        base = _dotted(expr.value)
        return f"{base}.{expr.attr.value}" if base else None
    return None


def _last(expr) -> str | None:
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.Attribute):
        return expr.attr.value
    return None


def _positional(call: cst.Call) -> list[tuple[int, cst.Arg]]:
    out = []
    for i, a in enumerate(call.args):
        if a.keyword is not None or a.star == "**":
            break
        if a.star == "*":
            return out + [(i, None)]          # positions after *args are unknown
        out.append((i, a))
    return out


def _find_arg(call: cst.Call, name: str, pos: int | None = None) -> tuple[int, cst.Arg] | None:
    for i, a in enumerate(call.args):
        if a.keyword is not None and a.keyword.value == name:
            return i, a
    if pos is not None:
        positional = _positional(call)
        if len(positional) > pos and positional[pos][1] is not None:
            return positional[pos]
    return None


def _has_double_star(call: cst.Call) -> bool:
    return any(a.star == "**" for a in call.args)


def _clean_ws(ws):
    """A copy of a comma's whitespace without any comment or blank lines it carried."""
    if isinstance(ws, cst.ParenthesizedWhitespace):
        return cst.ParenthesizedWhitespace(first_line=cst.TrailingWhitespace(), empty_lines=(),
                                           indent=ws.indent, last_line=ws.last_line)
    return cst.SimpleWhitespace(" ")


def _kwarg(name: str, value: cst.BaseExpression) -> cst.Arg:
    return cst.Arg(keyword=cst.Name(name), value=value,
                   equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                         whitespace_after=cst.SimpleWhitespace("")))


def _append_args(call: cst.Call, new: list[cst.Arg]) -> cst.Call:
    """Append keyword arguments, following the call's layout; comments stay on their lines."""
    args = list(call.args)
    if not new:
        return call
    if not args:
        return call.with_changes(args=[a.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
                                       for a in new[:-1]] + [new[-1]])
    last = args[-1]
    trailing, tail_ws = last.comma, last.whitespace_after_arg
    commas = [a.comma for a in args[:-1] if isinstance(a.comma, cst.Comma)]
    inline = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    line_ws = commas[-1].whitespace_after if commas else call.whitespace_before_args
    if isinstance(trailing, cst.Comma) and isinstance(trailing.whitespace_after, cst.ParenthesizedWhitespace) \
            and isinstance(line_ws, cst.ParenthesizedWhitespace):
        # one argument per line with a trailing comma: each new argument on its own line; the old
        # last argument keeps its end-of-line comment, the new last one gets a clean trailing comma
        t, ws = trailing.whitespace_after, _clean_ws(line_ws)
        first_sep = trailing.with_changes(whitespace_after=cst.ParenthesizedWhitespace(
            first_line=t.first_line, empty_lines=t.empty_lines, indent=ws.indent, last_line=ws.last_line))
        sep = cst.Comma(whitespace_after=ws)
        final = cst.Comma(whitespace_after=cst.ParenthesizedWhitespace(
            first_line=cst.TrailingWhitespace(), empty_lines=(), indent=t.indent, last_line=t.last_line))
    else:
        sep, final = inline, trailing
        broken = [c for c in commas if isinstance(c.whitespace_after, cst.ParenthesizedWhitespace)]
        # a call already wrapped over lines: start the new arguments on a continuation line
        first_sep = cst.Comma(whitespace_after=_clean_ws(broken[-1].whitespace_after)) if broken else inline
    args[-1] = last.with_changes(comma=first_sep, whitespace_after_arg=cst.SimpleWhitespace(""))
    for k, a in enumerate(new):
        is_last = k == len(new) - 1
        args.append(a.with_changes(comma=final if is_last else sep,
                                   whitespace_after_arg=tail_ws if is_last else cst.SimpleWhitespace("")))
    return call.with_changes(args=args)


def _set_arg(call: cst.Call, name: str, value: str | cst.BaseExpression, pos: int | None = None) -> cst.Call:
    expr = cst.parse_expression(value) if isinstance(value, str) else value
    found = _find_arg(call, name, pos)
    if found is not None:
        i, a = found
        args = list(call.args)
        args[i] = a.with_changes(value=expr)
        return call.with_changes(args=args)
    return _append_args(call, [_kwarg(name, expr)])


def _set_args(call: cst.Call, items: list[tuple[str, str, int | None]]) -> cst.Call:
    """Several ``name=value`` at once: existing ones replaced in place, the rest appended together."""
    missing = []
    for name, value, pos in items:
        if _find_arg(call, name, pos) is not None:
            call = _set_arg(call, name, value, pos)
        else:
            missing.append(_kwarg(name, cst.parse_expression(value)))
    return _append_args(call, missing) if missing else call


def _remove_arg(call: cst.Call, name: str) -> cst.Call:
    args = list(call.args)
    for i, a in enumerate(args):
        if a.keyword is not None and a.keyword.value == name:
            if i == len(args) - 1 and i > 0:
                args[i - 1] = args[i - 1].with_changes(comma=a.comma)
            del args[i]
            return call.with_changes(args=args)
    return call


def _rename_arg(call: cst.Call, old: str, new: str, value: str) -> cst.Call:
    args = list(call.args)
    for i, a in enumerate(args):
        if a.keyword is not None and a.keyword.value == old:
            args[i] = a.with_changes(keyword=cst.Name(new), value=cst.parse_expression(value))
            return call.with_changes(args=args)
    return call


def _is_literal(expr, value) -> bool:
    if value is True or value is False or value is None:
        return isinstance(expr, cst.Name) and expr.value == repr(value)
    if isinstance(value, int):
        return isinstance(expr, cst.Integer) and expr.evaluated_value == value
    return False


def _contains_call(node, pred: Callable[[cst.Call], bool]) -> bool:
    found = []

    class V(cst.CSTVisitor):
        def visit_Call(self, n):
            if pred(n):
                found.append(n)
            return not found

    node.visit(V())
    return bool(found)


def _is_backward(call: cst.Call) -> bool:
    return _last(call.func) == "backward"


def _binds_torch(module: cst.Module) -> bool:
    for st in module.body:
        if not isinstance(st, cst.SimpleStatementLine):
            continue
        for small in st.body:
            if isinstance(small, cst.Import):
                for alias in small.names:
                    name = _dotted(alias.name) or ""
                    bound = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else name.split(".")[0]
                    if bound == "torch" and name.split(".")[0] == "torch":
                        return True
    return False


def _is_import(st) -> bool:
    return isinstance(st, cst.SimpleStatementLine) and all(isinstance(s, (cst.Import, cst.ImportFrom)) for s in st.body)


def _is_future(st) -> bool:
    return _is_import(st) and all(isinstance(s, cst.ImportFrom) and _dotted(s.module) == "__future__" for s in st.body)


def _is_docstring(st) -> bool:
    return isinstance(st, cst.SimpleStatementLine) and len(st.body) == 1 and isinstance(st.body[0], cst.Expr) \
        and isinstance(st.body[0].value, (cst.SimpleString, cst.ConcatenatedString))


def _import_anchor(f: _File):
    """(statement, after?) where module-level settings go: after the last top-level import."""
    body = list(f.module.body)
    if not body:
        raise _Skip(f"{f.rel} is empty")
    imports = [st for st in body if _is_import(st)]
    if imports:
        return imports[-1], True
    head = [st for st in body[:1] if _is_docstring(st)]
    k = len(head)
    while k < len(body) and _is_future(body[k]):
        k += 1
    return (body[k - 1], True) if k else (body[0], False)


def _torch_import_anchor(f: _File):
    body = list(f.module.body)
    if not body:
        return None
    for st in body:
        if _is_import(st) and not _is_future(st):
            for s in st.body:
                mod = _dotted(s.module) if isinstance(s, cst.ImportFrom) and s.module is not None else None
                names = [_dotted(a.name) or "" for a in s.names] if isinstance(s, cst.Import) else []
                if (mod or "").split(".")[0] == "torch" or any(n.split(".")[0] == "torch" for n in names):
                    return st, False
    try:
        return _import_anchor(f)
    except _Skip:
        return None


def _assign_target(stmt) -> str | None:
    """The name bound by ``x = ...`` / ``self.x = ...``, or the receiver of ``x.to(...)``."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return None
    small = stmt.body[0]
    if isinstance(small, cst.Assign) and len(small.targets) == 1:
        return _dotted(small.targets[0].target)
    if isinstance(small, cst.AnnAssign) and small.value is not None:
        return _dotted(small.target)
    if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call) and \
            isinstance(small.value.func, cst.Attribute) and small.value.func.attr.value in ("to", "cuda"):
        return _dotted(small.value.func.value)
    return None


def _assignments(f: _File, suffix: str) -> list[cst.Assign]:
    """Every ``<...>.suffix = value`` in the file (suffix like "cudnn.benchmark")."""
    out = []
    for st, _, _ in f.stmts:
        if isinstance(st, cst.SimpleStatementLine):
            for small in st.body:
                if isinstance(small, cst.Assign) and any(
                        (_dotted(t.target) or "").endswith(suffix) for t in small.targets):
                    out.append(small)
    return out


def _assignments_at(f: _File, line: int, suffix: str) -> list[cst.Assign]:
    return [a for a in _assignments(f, suffix) if f.pos[a].start.line <= line <= f.pos[a].end.line]


def _set_true(node: cst.Assign) -> cst.Assign:
    return node.with_changes(value=cst.Name("True"))


def _where(f: _File, line: int) -> str:
    return f"{f.rel}:{line}"


def _warn(extra: dict, msg: str) -> None:
    extra["warning"] = f"{extra['warning']}; {msg}" if extra.get("warning") else msg


def _applied(where: str, edits: list[str], **extra) -> dict:
    return {"applied": True, "where": where, "edits": edits, "edits_at": [where], **extra}


# ----------------------------------------------------------------------------- fixes

def _set_to_none(ctx: _Context, fix: dict, p: dict) -> dict:
    f, line = ctx.site("zero_grad", fix)
    calls = f.calls_at(line, lambda c: _last(c.func) == "zero_grad")
    if not calls:
        raise _Skip(f"no zero_grad(...) call at {_where(f, line)}")
    call = calls[0]
    found = _find_arg(call, "set_to_none", 0)
    if found is None:
        raise _Skip(f"zero_grad() at {_where(f, line)} already uses the default set_to_none=True")
    if _is_literal(found[1].value, True):
        raise _Skip(f"zero_grad at {_where(f, line)} already passes set_to_none=True")
    ctx.on_node(f, call, lambda c: _set_arg(c, "set_to_none", "True", 0))
    return _applied(_where(f, f.line_of(call)), ["set_to_none=True"])


def _optimizer_classes() -> tuple[set[str], set[str]]:
    try:
        import inspect

        import torch
        fused, foreach = set(), set()
        for name in dir(torch.optim):
            cls = getattr(torch.optim, name)
            if isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer) and cls is not torch.optim.Optimizer:
                try:
                    params = inspect.signature(cls.__init__).parameters
                except (TypeError, ValueError):
                    continue
                if "fused" in params:
                    fused.add(name)
                if "foreach" in params:
                    foreach.add(name)
        return fused, foreach
    except Exception:  # noqa: BLE001 - torch missing or odd: fall back to the known list
        return set(_FUSED_OPTIMIZERS), set(_FOREACH_OPTIMIZERS)


def _fused_optimizer(ctx: _Context, fix: dict, p: dict) -> dict:
    f, line = ctx.site("optimizer", fix)
    fused, foreach = _optimizer_classes()
    observed = ((ctx.config.get("optimizer") or {}).get("value") or {}).get("class")
    known = {observed} if observed else fused | foreach
    calls = f.calls_at(line, lambda c: _last(c.func) in known)
    if not calls:
        raise _Skip(f"no torch.optim.{observed or '<Optimizer>'}(...) call at {_where(f, line)}")
    call = calls[0]
    cls = _last(call.func)
    here = _where(f, f.line_of(call))
    if cls in fused:
        if _find_arg(call, "fused") is not None and _is_literal(_find_arg(call, "fused")[1].value, True):
            raise _Skip(f"{cls} at {here} already passes fused=True")

        def edit(c: cst.Call) -> cst.Call:
            if _find_arg(c, "foreach") is not None and _find_arg(c, "fused") is None:
                return _rename_arg(c, "foreach", "fused", "True")
            return _set_arg(_remove_arg(c, "foreach"), "fused", "True")
        ctx.on_node(f, call, edit)
        return _applied(here, ["fused=True (foreach removed)" if _find_arg(call, "foreach") else "fused=True"])
    if cls in foreach:
        if _find_arg(call, "foreach") is not None and _is_literal(_find_arg(call, "foreach")[1].value, True):
            raise _Skip(f"{cls} at {here} already passes foreach=True and has no fused implementation")
        ctx.on_node(f, call, lambda c: _set_arg(c, "foreach", "True"))
        return _applied(here, [f"foreach=True ({cls} has no fused implementation)"])
    raise _Skip(f"{cls} has neither fused nor foreach")


def _cudnn_benchmark(ctx: _Context, fix: dict, p: dict) -> dict:
    site = ctx.site("cudnn.benchmark", fix, required=False)
    if site is not None:
        f, line = site
        found = _assignments_at(f, line, "cudnn.benchmark") or _assignments_at(f, line, "benchmark")
        if not found:
            raise _Skip(f"no assignment to cudnn.benchmark at {_where(f, line)}")
    else:
        f = ctx.script_file()
        found = _assignments(f, "cudnn.benchmark")
    if found:
        todo = [a for a in found if not _is_literal(a.value, True)]
        if not todo:
            raise _Skip("cudnn.benchmark is already set to True")
        for a in todo:
            ctx.on_node(f, a, _set_true)
        return _applied(_where(f, f.line_of(todo[0])), ["cudnn.benchmark = True"])
    ctx.after_imports(f, "torch.backends.cudnn.benchmark = True", _P_CUDNN)
    return _applied(_where(f, f.line_of(_import_anchor(f)[0])), ["torch.backends.cudnn.benchmark = True after the imports"])


def _tf32(ctx: _Context, fix: dict, p: dict) -> dict:
    script = ctx.script_file()
    edits, first = [], None
    for key, suffix, code in (("tf32.matmul", "matmul.allow_tf32", "torch.backends.cuda.matmul.allow_tf32 = True"),
                              ("tf32.cudnn", "cudnn.allow_tf32", "torch.backends.cudnn.allow_tf32 = True")):
        try:
            site = ctx.site(key, fix, required=False)
        except _Skip:
            site = None
        found: list = []
        f = script
        if site is not None:
            f, line = site
            found = _assignments_at(f, line, suffix)
        if not found:
            f = script
            found = _assignments(f, suffix)
        if found:
            for a in found:
                if not _is_literal(a.value, True):
                    ctx.on_node(f, a, _set_true)
            edits.append(f"{suffix} = True at {_where(f, f.line_of(found[0]))}")
            first = first or _where(f, f.line_of(found[0]))
        else:
            ctx.after_imports(script, code, _P_TF32)
            edits.append(code + " after the imports")
            first = first or _where(script, script.line_of(_import_anchor(script)[0]))
    # set_float32_matmul_precision("highest") would switch matmul TF32 back off
    for call, _, _ in script.calls:
        if _last(call.func) == "set_float32_matmul_precision" and call.args and \
                isinstance(call.args[0].value, cst.SimpleString) and call.args[0].value.evaluated_value == "highest":
            ctx.on_node(script, call, lambda c: _set_arg(c, "precision", '"high"', 0))
            edits.append(f'set_float32_matmul_precision("high") at {_where(script, script.line_of(call))}')
    return _applied(first, edits)


def _dataloader_call(ctx: _Context, fix: dict) -> tuple[_File, cst.Call]:
    f, line = ctx.site("dataloader", fix)
    calls = f.calls_at(line, lambda c: _last(c.func) == "DataLoader")
    if not calls:
        calls = f.calls_at(line, lambda c: any(a.keyword is not None and a.keyword.value in
                                                ("batch_size", "num_workers", "pin_memory") for a in c.args))
    if not calls:
        raise _Skip(f"no DataLoader(...) call at {_where(f, line)}")
    return f, calls[0]


def _dataloader(ctx: _Context, fix: dict, p: dict) -> dict:
    name = fix.get("intervention")
    f, call = _dataloader_call(ctx, fix)
    here = _where(f, f.line_of(call))
    workers = p.get("num_workers")
    if workers is None and name == "dataloader-workers":
        workers = max(2, min(8, os.cpu_count() or 2))
    pin = bool(p.get("pin_memory", True))
    prefetch = int(p.get("prefetch_factor", 4))
    edits: list[str] = []
    if workers is not None:
        workers = int(workers)
        edits.append(f"num_workers={workers}")
        edits += ["persistent_workers=True", f"prefetch_factor={prefetch}"] if workers > 0 else \
            ["persistent_workers and prefetch_factor removed (no workers)"]
    if pin:
        edits.append("pin_memory=True")
    if not edits:
        raise _Skip("nothing to change: no num_workers and pin_memory=False")

    def edit(c: cst.Call) -> cst.Call:
        items: list[tuple[str, str, int | None]] = []
        if workers is not None:
            items.append(("num_workers", str(workers), _DL_POS["num_workers"]))
            if workers > 0:
                items += [("persistent_workers", "True", None), ("prefetch_factor", str(prefetch), None)]
            else:
                c = _remove_arg(_remove_arg(c, "persistent_workers"), "prefetch_factor")
        if pin:
            items.append(("pin_memory", "True", _DL_POS["pin_memory"]))
        return _set_args(c, items)
    ctx.on_node(f, call, edit)
    extra = {}
    if _has_double_star(call):
        _warn(extra, "the DataLoader call also takes **kwargs: check they do not set the same arguments")
    if pin:
        edits += _non_blocking(ctx, fix, extra)
    return _applied(here, edits, **extra)


def _non_blocking(ctx: _Context, fix: dict, extra: dict) -> list[str]:
    try:
        site = ctx.site("h2d_copy", fix, required=False)
    except _Skip as e:
        _warn(extra, f"{e}: add non_blocking=True to the .to(device) copies yourself")
        return []
    if site is None:
        _warn(extra, "no host-to-device copy site was observed: add non_blocking=True to the .to(device) copies")
        return []
    f, line = site

    def is_copy(c: cst.Call) -> bool:
        return isinstance(c.func, cst.Attribute) and c.func.attr.value in ("to", "cuda")

    calls = f.calls_at(line, is_copy)
    if not calls:
        _warn(extra, f"no .to(...)/.cuda(...) call at {_where(f, line)}: add non_blocking=True yourself")
        return []
    copies = list(calls)
    # the same copy on the neighbouring lines (inputs, then targets): make those asynchronous too
    stmt = f.stmt_at(line)
    if isinstance(stmt, cst.SimpleStatementLine):
        args_code = {_code(c.with_changes(func=cst.Name("_"))) for c in calls}
        block = f.block_of(stmt)
        i = next(k for k, s in enumerate(block) if s is stmt)
        for step in (-1, 1):
            k = i + step
            while 0 <= k < len(block) and isinstance(block[k], cst.SimpleStatementLine):
                s = block[k]
                lo, hi = f.pos[s].start.line, f.pos[s].end.line
                same = [c for c, cs, ce in f.calls if lo <= cs and ce <= hi and is_copy(c)
                        and _code(c.with_changes(func=cst.Name("_"))) in args_code]
                if not same:
                    break
                copies += same
                k += step
    lines = []
    for c in copies:
        found = _find_arg(c, "non_blocking")
        if found is not None and _is_literal(found[1].value, True):
            continue
        ctx.on_node(f, c, lambda n: _set_arg(n, "non_blocking", "True"))
        lines.append(f.line_of(c))
    return [f"non_blocking=True at {_where(f, ln)}" for ln in sorted(set(lines))]


def _batch_size(ctx: _Context, fix: dict, p: dict) -> dict:
    factor = int(p.get("factor", 2))
    if factor < 2:
        raise _Skip(f"batch-size factor {factor} changes nothing")
    f, call = _dataloader_call(ctx, fix)
    here = _where(f, f.line_of(call))
    if (bs := _find_arg(call, "batch_sampler", 4)) is not None and not _is_literal(bs[1].value, None):
        raise _Skip(f"the DataLoader at {here} uses a batch_sampler")
    found = _find_arg(call, "batch_size", _DL_POS["batch_size"])
    if found is not None and _is_literal(found[1].value, None):
        raise _Skip(f"the DataLoader at {here} has batch_size=None")
    if found is None:
        new_code, value = f"batch_size={factor}", cst.Integer(str(factor))
    elif isinstance(found[1].value, cst.Integer):
        value = cst.Integer(str(found[1].value.evaluated_value * factor))
        new_code = f"batch_size={value.value}"
    else:
        old = found[1].value
        simple = isinstance(old, (cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.Integer)) or \
            (isinstance(old, cst.BinaryOperation) and isinstance(old.operator, (cst.Multiply, cst.FloorDivide)))
        text = _code(old.with_changes(lpar=(), rpar=())) if not simple else _code(old)
        value = cst.parse_expression(f"{text} * {factor}" if simple else f"({text}) * {factor}")
        new_code = f"batch_size={_code(value)}"

    def edit(c: cst.Call) -> cst.Call:
        hit = _find_arg(c, "batch_size", _DL_POS["batch_size"])
        if hit is None:
            return _set_arg(c, "batch_size", value)
        args = list(c.args)
        args[hit[0]] = hit[1].with_changes(value=value)
        return c.with_changes(args=args)
    ctx.on_node(f, call, edit)
    stmt = f.stmt_at(f.line_of(call))
    if stmt is not None:
        def comment(s):
            lines = list(s.leading_lines)
            if any(el.comment is not None and el.comment.value == LR_COMMENT for el in lines):
                return s
            return s.with_changes(leading_lines=[*lines, cst.EmptyLine(comment=cst.Comment(LR_COMMENT))])
        ctx.on_node(f, stmt, comment)
    return _applied(here, [new_code, "comment: scale the learning rate with the batch"], changes_numerics=True)


def _model_stmt(ctx: _Context, fix: dict, what: str) -> tuple[_File, object, str]:
    f, line = ctx.site("parameters", fix)
    stmt = f.stmt_at(line)
    target = _assign_target(stmt) if stmt is not None else None
    if target is None:
        raise _Skip(f"the model is not assigned to a name at {_where(f, line)}: add {what} yourself")
    return f, stmt, target


def _input_stmt(ctx: _Context, fix: dict, required: bool = True):
    site = ctx.site("input", fix, required=required)
    if site is None:
        return None
    f, line = site
    stmt = f.stmt_at(line)
    if stmt is None:
        raise _Skip(f"no statement at {_where(f, line)}")
    return f, line, stmt


def _channels_last(ctx: _Context, fix: dict, p: dict) -> dict:
    f, stmt, target = _model_stmt(ctx, fix, "model.to(memory_format=torch.channels_last)")
    ctx.insert(f, stmt, f"{target} = {target}.to(memory_format=torch.channels_last)", after=True, prio=_P_CHANNELS_LAST)
    edits = [f"{target} = {target}.to(memory_format=torch.channels_last) after {_where(f, f.line_of(stmt))}"]
    extra: dict = {}
    try:
        site = _input_stmt(ctx, fix, required=False)
    except _Skip as e:
        site = None
        _warn(extra, str(e))
    if site is None:
        if not extra:
            _warn(extra, "no model-call site was observed: convert the inputs yourself")
    elif not isinstance(site[2], cst.SimpleStatementLine):
        _warn(extra, f"the model call at {_where(site[0], site[1])} is inside a compound statement: "
                     "convert its input yourself")
    else:
        fi, line, istmt = site
        # the model's own call, else the innermost call of a plain name (criterion(model(x), y) -> model(x))
        calls = fi.calls_at(line, lambda c: _dotted(c.func) == target) or \
            fi.calls_at(line, lambda c: isinstance(c.func, cst.Name) and bool(_positional(c)))
        pos = _positional(calls[0]) if calls else []
        arg = pos[0][1].value if pos and pos[0][1] is not None else None
        if isinstance(arg, cst.Name):
            code = f"{arg.value} = {arg.value}.contiguous(memory_format=torch.channels_last)"
            ctx.insert(fi, istmt, code, after=False, prio=_P_INPUT)
            edits.append(f"{code} before {_where(fi, fi.line_of(istmt))}")
        else:
            _warn(extra, f"the model's input at {_where(fi, line)} is not a plain name: convert it yourself")
    return _applied(_where(f, f.line_of(stmt)), edits, **extra)


def _device_type(ctx: _Context, p: dict) -> str:
    if p.get("device_type"):
        return str(p["device_type"])
    for key in ("input", "parameters"):
        dev = ((ctx.config.get(key) or {}).get("value") or {}).get("device")
        if isinstance(dev, str) and dev:
            return dev.split(":")[0]
    return "cuda"


def _amp(ctx: _Context, fix: dict, p: dict) -> dict:
    f, line, stmt = _input_stmt(ctx, fix)
    dtype = p.get("dtype") or "bfloat16"
    device = _device_type(ctx, p)
    block = f.block_of(stmt)
    i = next(k for k, s in enumerate(block) if s is stmt)
    extra: dict = {}
    if _contains_call(stmt, _is_backward) or not isinstance(stmt, cst.SimpleStatementLine):
        last = stmt          # backward in the same statement, or a compound statement: wrap just it
    else:
        j = next((k for k in range(i + 1, len(block)) if _contains_call(block[k], _is_backward)), None)
        if j is not None:
            last = block[j - 1]
        elif isinstance(f.parent.get(f.parent.get(stmt)), cst.FunctionDef):
            last = block[-1]   # a forward/loss helper: the loss is computed to the end of it
            _warn(extra, "no .backward( after the model call in its function: wrapped to the end of the function")
        else:
            last = stmt
            _warn(extra, "no .backward( after the model call in its block: wrapped the model call only")
    head = f'torch.autocast(device_type="{device}", dtype=torch.{dtype})'

    def make(body, lead=()):
        return cst.With(items=[cst.WithItem(item=cst.parse_expression(head))],
                        body=cst.IndentedBlock(body=body), leading_lines=lead)
    ctx.wrap(f, stmt, last, make)
    if dtype == "float16":
        _warn(extra, "float16 autocast also needs torch.amp.GradScaler around backward and step: not added")
    span = f"{f.line_of(stmt)}-{f.pos[last].end.line}"
    return _applied(_where(f, f.line_of(stmt)), [f"with {head}: around lines {span}"], changes_numerics=True, **extra)


def _compile(ctx: _Context, fix: dict, p: dict) -> dict:
    f, stmt, target = _model_stmt(ctx, fix, "model = torch.compile(model)")
    mode = p.get("mode")
    code = f'{target} = torch.compile({target}, mode="{mode}")' if mode else f"{target} = torch.compile({target})"
    ctx.insert(f, stmt, code, after=True, prio=_P_COMPILE)
    return _applied(_where(f, f.line_of(stmt)), [f"{code} after {_where(f, f.line_of(stmt))}"])


_HANDLERS: dict[str, Callable[[_Context, dict, dict], dict]] = {
    "set-to-none": _set_to_none,
    "fused-optimizer": _fused_optimizer,
    "cudnn-benchmark": _cudnn_benchmark,
    "tf32": _tf32,
    "dataloader-workers": _dataloader,
    "pin-memory": _dataloader,
    "batch-size": _batch_size,
    "channels-last": _channels_last,
    "amp": _amp,
    "torch-compile": _compile,
}
