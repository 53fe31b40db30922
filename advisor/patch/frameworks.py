"""Framework-native edits: when the training loop lives in Hugging Face ``transformers.Trainer``
or Lightning's ``Trainer``, a fix is an argument of the call that configures the framework
(``TrainingArguments(bf16=True)``, ``L.Trainer(precision="bf16-mixed")``), not an edit of
the loop, which lives in site-packages where the generic editors cannot (and must not) go.

``framework_of`` decides once per patch; ``edit`` returns a note, raises SkipFix, or returns
None for a fix that is not framework-level (the generic editor then edits the user's code,
e.g. a LightningModule's ``configure_optimizers`` or its DataLoaders).
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import os
from collections import Counter
from dataclasses import dataclass

import libcst as cst

from . import knobs, options
from .call_args import (
    code_of,
    dotted_name,
    find_arg,
    has_double_star,
    set_args,
)
from .core import (
    PatchContext,
    SkipFix,
    SourceFile,
    add_warning,
    applied,
    location,
    where_key,
)

# A site under one of these directories is the framework's own code. accelerate runs under the
# HF Trainer and under hand-written loops alike, so it names no framework by itself.
_DIRS = (("/transformers/", "transformers"), ("/trl/", "transformers"), ("/lightning/", "lightning"),
         ("/pytorch_lightning/", "lightning"), ("/accelerate/", None))
# The loop's sites. "parameters" is left out: a hand-written loop around a from_pretrained model
# has its weights made inside transformers' files too.
_LOOP_KEYS = ("input", "optimizer", "zero_grad")


@dataclass
class _Call:
    framework: str
    kind: str          # "args" (TrainingArguments or a subclass), "parser" (HfArgumentParser), "trainer"
    file: SourceFile
    call: cst.Call


# ----------------------------------------------------------------------------- detection

def _in_framework(ctx: PatchContext, where) -> str | bool:
    """The framework whose files hold a "path:LINE" site: its name, True (accelerate), or False."""
    path = "/" + str(where or "").rpartition(":")[0].replace(os.sep, "/")
    installed = "/site-packages/" in path or "/dist-packages/" in path    # a venv inside the project too
    if path == "/" or not installed and os.path.realpath(os.path.join(ctx.cwd, path[1:])).startswith(ctx.root + os.sep):
        return False       # the user's project, even a clone named transformers/
    return next((fw or True for d, fw in _DIRS if d in path), False)


def _aliases(f: SourceFile) -> dict[str, str]:
    """Local name → the dotted path it was imported as (``L`` → ``lightning``)."""
    out = {}
    for node in f.pos:
        if isinstance(node, cst.Import):
            for a in node.names:
                name = dotted_name(a.name) or ""
                as_name = a.asname.name.value if a.asname and isinstance(a.asname.name, cst.Name) else None
                out[as_name or name.split(".")[0]] = name if as_name else name.split(".")[0]
        elif isinstance(node, cst.ImportFrom) and node.module is not None and not node.relative \
                and not isinstance(node.names, cst.ImportStar):
            for a in node.names:
                bound = a.asname.name.value if a.asname and isinstance(a.asname.name, cst.Name) else a.name.value
                out[bound] = f"{dotted_name(node.module)}.{dotted_name(a.name)}"
    return out


def _classify(full: str) -> tuple[str, str] | None:
    root, last = full.split(".")[0], full.rsplit(".", 1)[-1]
    if root in ("transformers", "trl"):
        if last.endswith("TrainingArguments") or (root == "trl" and last.endswith("Config")):
            return "transformers", "args"      # trl's SFTConfig & co. subclass TrainingArguments
        if last in ("HfArgumentParser", "TrlParser"):
            return "transformers", "parser"    # TrainingArguments from the command line
        if last.endswith("Trainer"):
            return "transformers", "trainer"
    if root in ("lightning", "pytorch_lightning") and last == "Trainer":
        return "lightning", "trainer"
    return None


def _calls(ctx: PatchContext) -> list[_Call]:
    """The framework calls in the script and the user's files that ran (unless the run did not record it)."""
    out, seen = [], set()
    for path in [ctx.script, *ctx.executed]:
        real = ctx._resolve_path(str(path))
        try:
            f = ctx.file(real) if real else None
        except SkipFix:
            continue       # a file outside the project, or one that does not parse
        if f is None or id(f) in seen:
            continue
        seen.add(id(f))
        names = _aliases(f)
        for call, line, _ in f.calls:
            head, _, rest = (dotted_name(call.func) or "").partition(".")
            kind = _classify(names[head] + ("." + rest if rest else "")) if head in names else None
            if kind is not None and ctx.ran(f, f.stmt_at(line)) is not False:
                out.append(_Call(*kind, f, call))
    return out


def framework_of(ctx: PatchContext) -> str | None:
    """"transformers", "lightning" or None (a loop of the user's own)."""
    votes = Counter(_in_framework(ctx, (ctx.config.get(k) or {}).get("where"))
                    for k in _LOOP_KEYS if isinstance(ctx.config.get(k), dict))
    named = Counter({k: v for k, v in votes.items() if isinstance(k, str)})
    static = Counter(c.framework for c in _calls(ctx))
    if named:   # the loop runs in a framework's files; the user's own calls break a tie
        return max(named, key=lambda fw: (named[fw], static[fw]))
    return max(static, key=lambda fw: static[fw]) if static else None


# ----------------------------------------------------------------------------- editing arguments

def _same(expr, value: str) -> bool:
    """Whether the user already passes this literal ('bf16-mixed' and "bf16-mixed" alike)."""
    try:
        return knobs.is_literal_value(expr) and ast.literal_eval(code_of(expr)) == ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return False


def _set_on(targets: list[_Call], ctx: PatchContext, items: list[tuple[str, str]], what: str, extra: dict) -> list[str]:
    """``name=value`` on each call that ran (a script may build its arguments in two branches): a
    literal replaced, a value from a flag or a config changed where the user keeps it (knobs),
    the missing ones appended. Returns the edits made; an unplaceable value is a warning."""
    if not targets:
        raise SkipFix(f"no {what}(...) call that ran was found in the user's files")
    edits: list[str] = []
    for t in targets:
        missing = []
        for name, value in items:
            found = find_arg(t.call, name)
            if found is None:
                missing.append((name, value, None))
                edits.append(f"{name}={value}")
            elif not _same(found[1].value, value):
                knobs.change(ctx, t.file, found[1].value, value, name, edits, extra)
        if missing and has_double_star(t.call):
            add_warning(extra, f"{what}(**...) at {location(t.file, t.file.line_of(t.call))}: if the unpacked "
                               f"mapping sets {', '.join(m[0] for m in missing)} too, take it out there")
        if missing:    # another fix may have appended one of them to this call already
            ctx.on_node(t.file, t.call, lambda c, m=missing: set_args(c, [a for a in m if find_arg(c, a[0]) is None]))
    return edits


def _note(where: _Call, edits: list[str], items: list[tuple[str, str]], what: str, extra: dict) -> dict:
    if not edits:
        raise SkipFix(extra.get("warning") or f"{what} already passes " + ", ".join(f"{k}={v}" for k, v in items))
    return applied(location(where.file, where.file.line_of(where.call)), edits, **extra)


def _on_calls(targets: list[_Call], ctx: PatchContext, items: list[tuple[str, str]], what: str, **extra) -> dict:
    edits = _set_on(targets, ctx, items, what, extra)
    return _note(targets[0], edits, items, what, extra)


def _bound_name(f: SourceFile, call: cst.Call) -> str | None:
    """The name ``x = <call>`` binds, or None."""
    stmt = f.stmt_at(f.line_of(call))
    small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
    if isinstance(small, cst.Assign) and len(small.targets) == 1 and small.value is call:
        return dotted_name(small.targets[0].target)
    return None


def _passed(argv: list[str], flag: str) -> str | None:
    """The value the command line gives ``flag``: "" for a bare ``--bf16`` (HfArgumentParser
    reads it as True), None when it does not pass it."""
    for i, tok in enumerate(argv):
        if tok.startswith(flag + "="):
            return tok.partition("=")[2]
        if tok == flag:
            return argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("-") else ""
    return None


def _from_parser(ctx: PatchContext, parser: _Call, items: list[tuple[str, str]], extra: dict) -> dict:
    """HfArgumentParser: TrainingArguments come from the command line. A value passed there is
    changed there; the others become ``parser.set_defaults(...)``, which argparse applies to
    parse_args_into_dataclasses."""
    f, name = parser.file, _bound_name(parser.file, parser.call)
    changes, defaults, edits = [], [], []
    for arg, value in items:
        flag, new, old = f"--{arg}", value.strip("\"'"), _passed(ctx.argv, f"--{arg}")
        # an option the run's parser read (config cli_options) that the command line did not
        # give: the recommended command passes it, no code edit (advisor.patch.switches' rule)
        added = options._added_on_command_line(ctx, arg, [flag], value, arg) if old is None else None
        if added is not None:
            edits += added[0]
            changes += added[1].get("argv_changes") or []
        elif old is None:
            defaults.append((arg, value))
        elif old == "" and new != "True":     # a bare flag has no value argv_changes could replace
            add_warning(extra, f"the command line passes {flag}: pass {flag} {new} instead")
        elif old not in ("", new) and old.lower() != new.lower():     # --bf16 true is True
            changes.append({"flag": flag, "from": old, "to": new})
            edits.append(f"pass {flag} {new}")
    sets = [c for c, _, _ in f.calls if isinstance(c.func, cst.Attribute) and c.func.attr.value == "set_defaults"
            and name and dotted_name(c.func.value) == name]
    if defaults and sets:
        edits += _set_on([_Call("transformers", "parser", f, sets[0])], ctx, defaults, f"{name}.set_defaults", extra)
    elif defaults and name:
        code = f"{name}.set_defaults({', '.join(f'{a}={v}' for a, v in defaults)})"
        ctx.insert(f, f.stmt_at(f.line_of(parser.call)), code, after=True, prio=0)
        edits.append(f"{code} after {location(f, f.line_of(parser.call))}")
    elif defaults:
        add_warning(extra, "TrainingArguments come from the command line (HfArgumentParser): pass "
                    + " ".join("--%s %s" % (a, v.strip("\"'")) for a, v in defaults))
    if changes:
        extra["argv_changes"] = changes
    return _note(parser, edits, items, "the command line", extra)


# ----------------------------------------------------------------------------- transformers

def _hf_has(field: str) -> bool:
    """Whether the installed TrainingArguments has this field, read from its source without
    importing transformers (seconds); True when it is not installed here."""
    try:
        spec = importlib.util.find_spec("transformers")
        with open(os.path.join(os.path.dirname(spec.origin), "training_args.py"), encoding="utf-8") as fh:
            return f"{field}:" in fh.read()
    except Exception:  # noqa: BLE001 - not installed (the patch may be made for another machine)
        return True


def _user_site(ctx: PatchContext, fix: dict) -> bool:
    """Whether the fix's own site (the DataLoader, the optimizer) was observed in the user's code."""
    where = (ctx.config.get(where_key(ctx, fix) or "") or {}).get("where")
    return bool(where) and _in_framework(ctx, where) is False


def _transformers(ctx: PatchContext, fix: dict, p: dict, calls: list[_Call]) -> dict | None:
    """A fix as TrainingArguments(...) items (Fix.transformers_args); None: not an argument of
    the Trainer's (its generic edit works)."""
    got = ctx.registry.get(fix.get("intervention")).transformers_args(ctx, fix, p, calls)
    if got is None:
        return None
    items, extra = got
    args, parsers = ([c for c in calls if c.kind == k] for k in ("args", "parser"))
    if not args and parsers:
        return _from_parser(ctx, parsers[0], items, extra)
    return _on_calls(args, ctx, items, "TrainingArguments", **extra)


# ----------------------------------------------------------------------------- Lightning

def _lightning_major() -> int:
    """Lightning 1.x spells precision 16 / "bf16"; 2.x warns on those and wants "16-mixed" / "bf16-mixed"."""
    for dist in ("lightning", "pytorch_lightning"):
        try:
            return int(importlib.metadata.version(dist).split(".")[0])
        except (importlib.metadata.PackageNotFoundError, ValueError):
            continue
    return 2       # not installed here: what current Lightning takes


def _fit(ctx: PatchContext, trainers: list[_Call], what: str) -> tuple[SourceFile, object, cst.Call, cst.Arg]:
    """(file, statement, call, model argument) of the first ``trainer.fit(model, ...)`` that ran, on
    a name bound to one of these Trainer calls (or on the call itself)."""
    for t in trainers:
        f, bound = t.file, _bound_name(t.file, t.call)
        for call, line, _ in f.calls:
            if isinstance(call.func, cst.Attribute) and call.func.attr.value == "fit" and ctx.ran(f, f.stmt_at(line)) \
                    is not False and (call.func.value is t.call or (bound and dotted_name(call.func.value) == bound)):
                found = find_arg(call, "model", 0)
                if found is None or not isinstance(found[1].value, cst.Name):
                    raise SkipFix(f"the model given to fit at {location(f, line)} is not a plain name: add {what} yourself")
                return f, f.stmt_at(line), call, found[1]
    raise SkipFix(f"no trainer.fit(model, ...) call that ran was found: add {what} yourself")


def _lightning(ctx: PatchContext, fix: dict, p: dict, calls: list[_Call]) -> dict | None:
    """A fix as Lightning writes it (Fix.lightning_edit); None: the user's own code (generic)."""
    trainers = [c for c in calls if c.kind == "trainer"]
    return ctx.registry.get(fix.get("intervention")).lightning_edit(ctx, fix, p, trainers)


def edit(ctx: PatchContext, fix: dict, params: dict, framework: str | None = None) -> dict | None:
    """The framework-native edit of one fix: a note, SkipFix, or None (not framework-level)."""
    framework = framework or framework_of(ctx)
    if framework is None:
        return None
    calls = [c for c in _calls(ctx) if c.framework == framework]
    return (_transformers if framework == "transformers" else _lightning)(ctx, fix, params, calls)
