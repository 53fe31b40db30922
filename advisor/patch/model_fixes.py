"""Fixes around the model: channels-last memory format, autocast (AMP) and torch.compile."""

from __future__ import annotations

import libcst as cst

from .call_args import dotted_name, last_name, positional_args
from .core import PRIO_CHANNELS_LAST, PRIO_COMPILE, PRIO_INPUT, PatchContext, SkipFix, SourceFile, add_warning, applied, device_type, location


def _assign_target(stmt) -> str | None:
    """The name bound by ``x = ...`` / ``self.x = ...``, or the receiver of ``x.to(...)``."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return None
    small = stmt.body[0]
    if isinstance(small, cst.Assign) and len(small.targets) == 1:
        return dotted_name(small.targets[0].target)
    if isinstance(small, cst.AnnAssign) and small.value is not None:
        return dotted_name(small.target)
    if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call) and \
            isinstance(small.value.func, cst.Attribute) and small.value.func.attr.value in ("to", "cuda"):
        return dotted_name(small.value.func.value)
    return None


def _model_binding(f: SourceFile, line: int):
    """(statement, name) binding the model called on `line` (``out = model(x)`` → the last
    ``model = ...`` before it), or None. The runner observes parameters at the model's first
    call, so the site is usually the call, not where the model was made."""
    calls = f.calls_at(line, lambda c: dotted_name(c.func) is not None and bool(positional_args(c)))
    for call in calls:  # innermost first: criterion(model(x), y) -> model(x)
        name = dotted_name(call.func)
        binds = [(s, st) for st, s, _e in f.stmts if s < line and _assign_target(st) == name]
        if binds:
            return max(binds, key=lambda t: t[0])[1], name
    return None


def _model_stmt(ctx: PatchContext, fix: dict, what: str) -> tuple[SourceFile, object, str]:
    """(file, statement, model name) where the model is created or moved to its device."""
    f, line = ctx.site("parameters", fix)
    found = _model_binding(f, line)
    if found is not None:
        return f, found[0], found[1]
    stmt = f.stmt_at(line)
    target = _assign_target(stmt) if stmt is not None else None
    if target is None:
        raise SkipFix(f"the model is not assigned to a name at {location(f, line)}: add {what} yourself")
    return f, stmt, target


def _input_stmt(ctx: PatchContext, fix: dict, required: bool = True):
    """(file, line, statement) of the model call, or None when not observed and not required."""
    site = ctx.site("input", fix, required=required)
    if site is None:
        return None
    f, line = site
    stmt = f.stmt_at(line)
    if stmt is None:
        raise SkipFix(f"no statement at {location(f, line)}")
    return f, line, stmt


def channels_last(ctx: PatchContext, fix: dict, p: dict) -> dict:
    f, stmt, target = _model_stmt(ctx, fix, "model.to(memory_format=torch.channels_last)")
    ctx.insert(f, stmt, f"{target} = {target}.to(memory_format=torch.channels_last)", after=True, prio=PRIO_CHANNELS_LAST)
    edits = [f"{target} = {target}.to(memory_format=torch.channels_last) after {location(f, f.line_of(stmt))}"]
    extra: dict = {}
    try:
        site = _input_stmt(ctx, fix, required=False)
    except SkipFix as e:
        site = None
        add_warning(extra, str(e))
    if site is None:
        if not extra:
            add_warning(extra, "no model-call site was observed: convert the inputs yourself")
    elif not isinstance(site[2], cst.SimpleStatementLine):
        add_warning(extra, f"the model call at {location(site[0], site[1])} is inside a compound statement: "
                           "convert its input yourself")
    else:
        fi, line, istmt = site
        # the model's own call, else the innermost call of a plain name (criterion(model(x), y) -> model(x))
        calls = fi.calls_at(line, lambda c: dotted_name(c.func) == target) or \
            fi.calls_at(line, lambda c: isinstance(c.func, cst.Name) and bool(positional_args(c)))
        pos = positional_args(calls[0]) if calls else []
        arg = pos[0][1].value if pos and pos[0][1] is not None else None
        if isinstance(arg, cst.Name):
            code = f"{arg.value} = {arg.value}.contiguous(memory_format=torch.channels_last)"
            ctx.insert(fi, istmt, code, after=False, prio=PRIO_INPUT)
            edits.append(f"{code} before {location(fi, fi.line_of(istmt))}")
        else:
            add_warning(extra, f"the model's input at {location(fi, line)} is not a plain name: convert it yourself")
    return applied(location(f, f.line_of(stmt)), edits, **extra)


def _contains_backward(node) -> bool:
    found = []

    class Finder(cst.CSTVisitor):
        def visit_Call(self, n):
            if last_name(n.func) == "backward":
                found.append(n)
            return not found

    node.visit(Finder())
    return bool(found)


def amp(ctx: PatchContext, fix: dict, p: dict) -> dict:
    """Autocast from the model call through the loss, stopping before ``.backward()``."""
    f, line, stmt = _input_stmt(ctx, fix)
    dtype = p.get("dtype") or "bfloat16"
    device = device_type(ctx, p)
    block = f.block_of(stmt)
    i = next(k for k, s in enumerate(block) if s is stmt)
    extra: dict = {}
    if _contains_backward(stmt) or not isinstance(stmt, cst.SimpleStatementLine):
        last = stmt          # backward in the same statement, or a compound statement: wrap just it
    else:
        j = next((k for k in range(i + 1, len(block)) if _contains_backward(block[k])), None)
        if j is not None:
            last = block[j - 1]
        elif isinstance(f.parent.get(f.parent.get(stmt)), cst.FunctionDef):
            last = block[-1]   # a forward/loss helper: the loss is computed to the end of it
            add_warning(extra, "no .backward( after the model call in its function: wrapped to the end of the function")
        else:
            last = stmt
            add_warning(extra, "no .backward( after the model call in its block: wrapped the model call only")
    head = f'torch.autocast(device_type="{device}", dtype=torch.{dtype})'

    def make(body):
        return cst.With(items=[cst.WithItem(item=cst.parse_expression(head))], body=cst.IndentedBlock(body=body))
    ctx.wrap(f, stmt, last, make)
    if dtype == "float16":
        add_warning(extra, "float16 autocast also needs torch.amp.GradScaler around backward and step: not added")
    span = f"{f.line_of(stmt)}-{f.pos[last].end.line}"
    return applied(location(f, f.line_of(stmt)), [f"with {head}: around lines {span}"], changes_numerics=True, **extra)


def torch_compile(ctx: PatchContext, fix: dict, p: dict) -> dict:
    """``model.compile()`` in place (Module.compile): ``model = torch.compile(model)`` would bind
    the name to a wrapper whose state_dict keys start with ``_orig_mod.``, and the script's
    checkpoints would no longer load into the plain model."""
    f, stmt, target = _model_stmt(ctx, fix, "model.compile()")
    mode = p.get("mode") if p.get("mode") != "default" else None
    code = f'{target}.compile(mode="{mode}")' if mode else f"{target}.compile()"
    ctx.insert(f, stmt, code, after=True, prio=PRIO_COMPILE)
    return applied(location(f, f.line_of(stmt)), [f"{code} after {location(f, f.line_of(stmt))}"])
