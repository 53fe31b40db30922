"""The machinery every fix shares: parsed files, config sites, recorded edits, the one
transformer pass that applies them, and the unified diff.

Fixes never change a tree themselves: they record edits keyed by nodes of the ORIGINAL tree
(resolved from line numbers through PositionProvider), and ``PatchContext.render`` applies all
of a file's edits in one ``ApplyEdits`` pass, so several fixes on one file, even on one call,
compose whatever their order.
"""

from __future__ import annotations

import ast
import difflib
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

with warnings.catch_warnings():     # libcst imports a deprecated mypy_extensions.TypedDict
    warnings.simplefilter("ignore", DeprecationWarning)
    import libcst as cst
    from libcst.metadata import MetadataWrapper, ParentNodeProvider, PositionProvider

from .imports import binds_torch, settings_anchor, torch_import_anchor


class SkipFix(Exception):
    """The fix cannot be placed; the message is the note's reason."""


def where_key(ctx: PatchContext, fix: dict) -> str | None:
    """The config key whose call site the fix's own "where" (from its rule) may stand in for,
    when the child did not record one (Fix.where_key)."""
    return ctx.registry.trait(fix.get("intervention"), "where_key", None)

# Order of statements inserted at one anchor.
PRIO_IMPORT, PRIO_CUDNN, PRIO_TF32, PRIO_CHANNELS_LAST, PRIO_COMPILE, PRIO_INPUT = 0, 10, 20, 30, 40, 50


def device_type(ctx: PatchContext, p: dict) -> str:
    """The device the fix is for: its own parameter, else where the run saw inputs or weights."""
    if p.get("device_type") or p.get("device"):
        return str(p.get("device_type") or p["device"]).split(":")[0]
    for key in ("input", "parameters"):
        dev = ((ctx.config.get(key) or {}).get("value") or {}).get("device")
        if isinstance(dev, str) and dev:
            return dev.split(":")[0]
    return "cuda"


# ----------------------------------------------------------------------------- parsed files

@dataclass
class SourceFile:
    path: str
    rel: str
    text: str
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

    def top_stmt_at(self, line: int):
        """The module-level statement holding this line (the def of the function it is in)."""
        hits = [(e - s, st) for st, s, e in self.stmts if s <= line <= e and isinstance(self.parent.get(st), cst.Module)]
        return max(hits, key=lambda t: t[0])[1] if hits else None

    def block_of(self, stmt) -> list:
        return list(self.parent[stmt].body)


def parse_file(path: str, rel: str) -> SourceFile:
    with open(path, "rb") as fh:
        raw = fh.read()
    wrapper = MetadataWrapper(cst.parse_module(raw))
    pos = wrapper.resolve(PositionProvider)
    parent = wrapper.resolve(ParentNodeProvider)
    module = wrapper.module
    f = SourceFile(path=path, rel=rel, text=raw.decode(module.encoding), module=module, pos=pos, parent=parent)
    for node, rng in pos.items():
        if isinstance(node, cst.Call):
            f.calls.append((node, rng.start.line, rng.end.line))
        elif isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)) and \
                isinstance(parent.get(node), (cst.Module, cst.IndentedBlock)):
            f.stmts.append((node, rng.start.line, rng.end.line))
    return f


# ----------------------------------------------------------------------------- notes

def location(f: SourceFile, line: int) -> str:
    return f"{f.rel}:{line}"


def add_warning(extra: dict, msg: str) -> None:
    extra["warning"] = f"{extra['warning']}; {msg}" if extra.get("warning") else msg


def applied(where: str, edits: list[str], **extra) -> dict:
    return {"applied": True, "where": where, "edits": edits, "edits_at": [where], **extra}


# ----------------------------------------------------------------------------- edits

@dataclass
class Edit:
    kind: str          # "node" | "before" | "after" | "wrap" | "torch"
    file: SourceFile
    node: object = None
    fn: Callable | None = None
    prio: int = 0
    stmt: object = None    # inserted statement ("before"/"after") or last wrapped statement ("wrap")
    key: str = ""          # for de-duplication
    blank: bool = False    # an inserted statement that wants a blank line above its group (after the imports)


@dataclass
class PatchContext:
    script: str
    root: str
    cwd: str
    config: dict
    files: dict = field(default_factory=dict)
    edits: list = field(default_factory=list)
    # the run's executed lines ({"path": [lines]}, paths as the config's sites give them);
    # empty when the run recorded none (an older run.json): then nothing is ruled out
    executed: dict = field(default_factory=dict)
    texts: dict = field(default_factory=dict)   # rel path → the patched text (render)
    argv: list = field(default_factory=list)    # the script's arguments, as the run had them
    environ: dict = field(default_factory=dict)  # the run's environment variables (an env: knob's source)
    text_edits: dict = field(default_factory=dict)  # a non-Python file's path → {line: new line}
    # the fixes' registry (advisor.fixes: get, known, trait), handed in by advisor.fixes.make_patch:
    # each fix holds its edit, this package is the editing machinery they share
    registry: object = None
    _ran: dict | None = None

    def text_edit(self, path: str, line: int, new: str) -> None:
        """Replace one line of a non-Python file in the project (a YAML config's value)."""
        rel = os.path.relpath(os.path.realpath(path), self.root)
        if rel.startswith(os.pardir):
            raise SkipFix(f"{path} is outside {self.root}; not editing it")
        self.text_edits.setdefault(os.path.realpath(path), {})[line] = new

    # --- what ran
    def ran_lines(self, f: SourceFile) -> set[int] | None:
        """The lines of ``f`` that ran, or None when the run recorded no lines at all."""
        if not self.executed:
            return None
        return self._ran_map().get(os.path.realpath(f.path), set())

    def ran_files(self) -> list[str]:
        """The files whose lines ran (real paths; none when the run recorded no lines)."""
        return list(self._ran_map()) if self.executed else []

    def _ran_map(self) -> dict[str, set[int]]:
        if self._ran is None:
            self._ran = {}
            for path, lines in self.executed.items():
                real = self._resolve_path(str(path))
                if real is not None:
                    self._ran.setdefault(os.path.realpath(real), set()).update(int(x) for x in lines)
        return self._ran

    def ran(self, f: SourceFile, stmt) -> bool | None:
        """Whether a statement ran (for a compound statement, its header); None: not known."""
        lines = self.ran_lines(f)
        if lines is None:
            return None
        start, end = f.pos[stmt].start.line, f.pos[stmt].end.line
        body = getattr(stmt, "body", None)
        if isinstance(stmt, cst.BaseCompoundStatement) and body is not None and body in f.pos:
            end = max(start, f.pos[body].start.line - 1)
        return any(start <= ln <= end for ln in lines)

    # --- files and sites
    def file(self, path: str) -> SourceFile:
        path = os.path.realpath(path)
        if path not in self.files:
            rel = os.path.relpath(path, self.root)
            if rel.startswith(os.pardir + os.sep) or rel == os.pardir or os.path.isabs(rel):
                raise SkipFix(f"{path} is outside {self.root}; not editing it")
            if _installed(path):   # a virtual environment inside the repository is not the user's code
                raise SkipFix(f"{path} is an installed package's; not editing it")
            try:
                self.files[path] = parse_file(path, rel.replace(os.sep, "/"))
            except (OSError, cst.ParserSyntaxError, UnicodeDecodeError) as e:
                raise SkipFix(f"cannot parse {path}: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from e
        return self.files[path]

    def script_file(self) -> SourceFile:
        return self.file(self.script)

    def site(self, key: str, fix: dict, required: bool = True) -> tuple[SourceFile, int] | None:
        """The (file, line) of a config site, or None / SkipFix when it was not observed."""
        item = self.config.get(key)
        where = item.get("where") if isinstance(item, dict) else None
        if not where and where_key(self, fix) == key:
            where = fix.get("where")
        if not where:
            if required:
                raise SkipFix(f"no {key!r} site was observed in the run's config")
            return None
        return self.locate(str(where), f"the {key!r} site")

    def locate(self, where: str, what: str = "the site") -> tuple[SourceFile, int]:
        """(file, line) of an observed "path:LINE"; SkipFix when it cannot be read or found."""
        path, _, line = where.rpartition(":")
        if not path or not line.strip().isdigit():
            raise SkipFix(f"cannot read {what} {where!r}")
        resolved = self._resolve_path(path)
        if resolved is None:
            raise SkipFix(f"{what} {where} is not a file found from {self.cwd} or {os.path.dirname(self.script)}")
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
    def on_node(self, f: SourceFile, node, fn: Callable, late: bool = False) -> None:
        """fn(updated node) -> node. A ``late`` edit runs after the others on that node, on
        what they made of it (preload-dataset moves the batch size another fix may set)."""
        self.edits.append(Edit("node", f, node=node, fn=fn, prio=int(late)))

    def insert(self, f: SourceFile, anchor, code: str, *, after: bool, prio: int, blank: bool = False,
               lines_before: int = 0) -> None:
        key = f"{'after' if after else 'before'}:{id(anchor)}:{code}"
        if any(e.key == key for e in self.edits):
            return
        stmt = cst.parse_statement(code)
        if lines_before:  # a definition at module level: blank lines as PEP 8 has them
            stmt = stmt.with_changes(leading_lines=[cst.EmptyLine()] * lines_before)
        self.edits.append(Edit("after" if after else "before", f, node=anchor,
                               stmt=stmt, prio=prio, key=key, blank=blank))
        if "torch." in code:
            self.need_torch(f)

    def wrap(self, f: SourceFile, first, last, fn: Callable) -> None:
        if any(e.kind == "wrap" and e.file is f and e.node is first for e in self.edits):
            raise SkipFix("those statements are already wrapped by another fix")
        self.edits.append(Edit("wrap", f, node=first, stmt=last, fn=fn))
        self.need_torch(f)

    def need_torch(self, f: SourceFile) -> None:
        self.edits.append(Edit("torch", f))

    def after_imports(self, f: SourceFile, code: str, prio: int):
        """Insert a module-level setting after the imports; returns the statement it follows (or precedes)."""
        target = settings_anchor(f.module)
        if target is None:
            raise SkipFix(f"{f.rel} is empty")
        anchor, after = target
        self.insert(f, anchor, code, after=after, prio=prio, blank=after)
        return anchor

    def insert_after_imports(self, f: SourceFile, codes: list[str], prio: int, lines_before: int = 0) -> None:
        """Module-level statements after the imports, in this order (definitions: lines_before
        blank lines above each, as PEP 8 has them)."""
        target = settings_anchor(f.module)
        if target is None:
            raise SkipFix(f"{f.rel} is empty")
        anchor, after = target
        for i, code in enumerate(codes):
            self.insert(f, anchor, code, after=after, prio=prio + i, blank=after and not i and not lines_before,
                        lines_before=lines_before)

    # --- output
    def render(self, notes: list[dict]) -> str:
        chunks = []
        for f in sorted(self.files.values(), key=lambda f: f.rel):
            edits = [e for e in self.edits if e.file is f]
            if not any(e.kind != "torch" for e in edits):
                continue
            if any(e.kind == "torch" for e in edits) and not binds_torch(f.module):
                target = torch_import_anchor(f.module)
                if target is not None:
                    anchor, after = target
                    edits.append(Edit("after" if after else "before", f, node=anchor,
                                      stmt=cst.parse_statement("import torch"), prio=PRIO_IMPORT))
            new = f.module.visit(ApplyEdits(edits)).code
            try:
                ast.parse(new)
            except SyntaxError as e:  # a bug here must not hand the user a broken file
                for n in notes:
                    if n.get("applied") and any(w.startswith(f.rel + ":") for w in n.get("edits_at", [])):
                        n.update(applied=False, reason=f"internal error: the edit does not parse ({e.msg})")
                continue
            if new != f.text:
                chunks.append(unified_diff(f.text, new, f.rel))
                self.texts[f.rel] = new
        for path, lines in sorted(self.text_edits.items()):
            rel = os.path.relpath(path, self.root).replace(os.sep, "/")
            with open(path, encoding="utf-8", newline="") as fh:
                old = fh.read()
            rows = old.splitlines(keepends=True)
            for n, text in lines.items():
                end = rows[n - 1][len(rows[n - 1].rstrip("\r\n")):]
                rows[n - 1] = text + end
            new = "".join(rows)
            if new != old:
                chunks.append(unified_diff(old, new, rel))
                self.texts[rel] = new
        for n in notes:
            n.pop("edits_at", None)
        return "".join(chunks)


def unified_diff(old: str, new: str, rel: str) -> str:
    out = []
    for line in difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                     fromfile=f"a/{rel}", tofile=f"b/{rel}"):
        if line.startswith(("---", "+++")):
            line = line.rstrip("\n") + "\n"      # difflib puts no newline issue here; keep one
        if not line.endswith("\n"):
            line += "\n\\ No newline at end of file\n"
        out.append(line)
    return "".join(out)


class ApplyEdits(cst.CSTTransformer):
    """One pass applying every recorded edit, keyed by original node."""

    def __init__(self, edits: list[Edit]):
        super().__init__()
        self.node_fns: dict = {}
        self.before: dict = {}
        self.after: dict = {}
        self.wraps: dict = {}
        for e in sorted(edits, key=lambda e: e.prio if e.kind == "node" else 0):  # stable
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


def _installed(path: str) -> bool:
    """Is ``path`` inside an installed package (site-packages, dist-packages, the interpreter's
    own library)?"""
    import sysconfig

    parts = path.split(os.sep)
    if "site-packages" in parts or "dist-packages" in parts:
        return True
    std = [os.path.realpath(p) for p in (sysconfig.get_paths().get("stdlib"),) if p]
    return any(path.startswith(d + os.sep) for d in std)
