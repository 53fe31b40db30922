"""Fixes around the model: channels-last memory format, autocast (AMP) and torch.compile."""

from __future__ import annotations

import re

import libcst as cst

from . import knobs, switches
from .call_args import dotted_name, find_arg, last_name, positional_args
from .core import (
    PRIO_CHANNELS_LAST,
    PRIO_COMPILE,
    PRIO_INPUT,
    PatchContext,
    SkipFix,
    SourceFile,
    add_warning,
    applied,
    device_type,
    location,
)


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


def _in_loop(f: SourceFile, stmt) -> bool:
    """Whether ``stmt`` sits in a for/while loop of its own function (it runs every epoch)."""
    node = f.parent.get(stmt)
    while node is not None and not isinstance(node, (cst.FunctionDef, cst.Module, cst.ClassDef)):
        if isinstance(node, (cst.For, cst.While)):
            return True
        node = f.parent.get(node)
    return False


def _placed_binding(ctx: PatchContext, skipped: list[str], key: str = "model"):
    """(file, statement, name) from the run's record of where the model was moved
    (config ``key``: the script's frames of its last ``.to``/``.cuda``, innermost first): the
    first frame whose statement binds or moves a name, outside a loop, in a file we edit."""
    stack = (ctx.config.get(key) or {}).get("stack") or []
    for where in stack:
        try:
            f, line = ctx.locate(str(where), "the model's placement")
        except SkipFix as e:
            skipped.append(str(e))
            continue
        stmt = f.stmt_at(line)
        target = _assign_target(stmt) if stmt is not None else None
        if target is None:
            continue   # `return Net().to(dev)` in a helper: its caller binds the result
        if _in_loop(f, stmt):
            skipped.append(f"{location(f, line)} runs in a loop")
            continue
        return f, stmt, target
    return None


def _model_binding(ctx: PatchContext, f: SourceFile, line: int):
    """(statement, name) binding the model called on `line` (``out = model(x)`` → the last
    ``model = ...`` before it that ran), or None. Used when the run recorded no placement
    (a model made on its device, or a run.json from before placements were recorded)."""
    calls = f.calls_at(line, lambda c: dotted_name(c.func) is not None and bool(positional_args(c)))
    for call in calls:  # innermost first: criterion(model(x), y) -> model(x)
        name = dotted_name(call.func)
        binds = [(s, st) for st, s, _e in f.stmts if s < line and _assign_target(st) == name
                 and ctx.ran(f, st) is not False]
        if binds:
            return max(binds, key=lambda t: t[0])[1], name
    return None


def model_stmt(ctx: PatchContext, fix: dict, what: str, key: str = "model") -> tuple[SourceFile, object, str]:
    """(file, statement, model name) after which the model is converted or compiled: a
    statement that ran, where the model was moved to its device (else bound). ``key``: the
    config entry naming the model ("first_model": the one the compile trial compiled)."""
    skipped: list[str] = []
    found = _placed_binding(ctx, skipped, key if ctx.config.get(key) else "model")
    if found is not None:
        return found
    f, line = ctx.site("parameters", fix)
    binding = _model_binding(ctx, f, line)
    if binding is not None:
        return f, binding[0], binding[1]
    stmt = f.stmt_at(line)
    target = _assign_target(stmt) if stmt is not None else None
    if f.calls_at(line, lambda c: isinstance(c.func, cst.Name) and c.func.value == "self"):
        # `logits = self(x)` in a LightningModule's training_step: the model is the module
        # itself, and the name bound there is its output
        raise SkipFix(f"the model calls itself at {location(f, line)}: add {what} where it is made")
    if target is None:
        why = f" ({'; '.join(skipped)})" if skipped else ""
        raise SkipFix(f"the model is not assigned to a name at {location(f, line)}{why}: add {what} yourself")
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


def _switch_on(ctx: PatchContext, f: SourceFile, node) -> dict | None:
    """The script's own switch for this fix: ``if params.channels_last:`` whose body does it and
    did not run. Its value is turned on where the user keeps it (the YAML section, the flag's
    default: advisor.patch.knobs); None when it is not a plain name or its source is not found."""
    if not isinstance(node, cst.If) or dotted_name(node.test) is None:
        return None
    try:
        edits, extra = knobs.set_value(ctx, f, node.test, "True", f"the script's own switch {dotted_name(node.test)}")
    except SkipFix:
        return None
    sources = {dotted_name(node.test): extra.pop("source", [])}
    return applied(location(f, f.line_of(node)), edits, sources=sources, **extra)


def _switch_dtype(ctx: PatchContext, f: SourceFile, switch, dtype: str, note: dict) -> None:
    """The dtype the trial measured, in the autocast under the script's own switch: a
    ``torch.float16`` there is replaced, a name is followed to where the user keeps it."""
    calls = [c for c, s, e in f.calls if last_name(c.func) == "autocast" and
             f.pos[switch.body].start.line <= s <= f.pos[switch.body].end.line]
    found = find_arg(calls[0], "dtype") if calls else None
    if found is None:
        return
    expr = found[1].value
    if dotted_name(expr) == f"torch.{dtype}":
        return
    if dotted_name(expr) in ("torch.float16", "torch.half", "torch.bfloat16"):
        ctx.on_node(f, expr, lambda _n: cst.parse_expression(f"torch.{dtype}"))
        note["edits"].append(f"dtype=torch.{dtype} at {location(f, f.line_of(expr))}")
        return
    try:
        edits, extra = knobs.set_value(ctx, f, expr, f'"{dtype}"', "the autocast dtype")
        note["edits"] += edits
        note.setdefault("sources", {})["dtype"] = extra.get("source", [])
    except SkipFix as e:
        add_warning(note, f"{e} (the trials measured {dtype})")


def _does(f: SourceFile, node, marker: str) -> bool:
    return marker in f.module.code_for_node(node)


def _next_switch(ctx: PatchContext, f: SourceFile, stmt, marker: str):
    """An ``if <name>:`` among the few statements after ``stmt`` whose body mentions ``marker``
    and did not run."""
    block = f.block_of(stmt)
    i = next(k for k, s in enumerate(block) if s is stmt)
    for node in block[i + 1:i + 4]:
        if isinstance(node, cst.If) and _does(f, node.body, marker) and \
                ctx.ran(f, node.body.body[0]) is False:
            return node
    return None


def conversion(ctx: PatchContext, target: str) -> str:
    """The statement converting the model's weights to channels_last: ``model.to(...)``, or
    where the model's class overrides ``.to()`` (config model ``own_to``: a task wrapper whose
    ``.to()`` probes ``torch.empty(0).to(*args, **kwargs)``, which raises for channels_last)
    torch's own Module.to called on it, which converts every submodule's 4-D weights and runs
    no class's ``.to()``."""
    own = ((ctx.config.get("model") or {}).get("value") or {}).get("own_to")
    if own:
        return f"{target} = torch.nn.Module.to({target}, memory_format=torch.channels_last)"
    return f"{target} = {target}.to(memory_format=torch.channels_last)"


def channels_last(ctx: PatchContext, fix: dict, p: dict) -> dict:
    via = switches.use(ctx, "channels-last", p, "channels-last")
    if via is not None:
        return via    # the script's own --channels-last (or its config key), turned on: no edit
    f, stmt, target = model_stmt(ctx, fix, "model.to(memory_format=torch.channels_last)")
    switch = _next_switch(ctx, f, stmt, "channels_last")
    note = _switch_on(ctx, f, switch) if switch is not None else None
    if note is not None:
        return note   # the script converts its model and inputs under its own switch
    code = conversion(ctx, target)
    ctx.insert(f, stmt, code, after=True, prio=PRIO_CHANNELS_LAST)
    edits = [f"{code} after {location(f, f.line_of(stmt))}"]
    extra: dict = {}
    own = ((ctx.config.get("model") or {}).get("value") or {}).get("own_to")
    if own:
        extra["why"] = (f"the model's class has its own .to() ({own}): torch's Module.to converts its weights "
                        "without running it, as the trial did")
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
        # as the trial does, only a 4-D input is converted (a GAN's generator takes a 2-D embedding)
        shape = ((ctx.config.get("input") or {}).get("value") or {}).get("shape")
        if isinstance(shape, list) and len(shape) != 4:
            add_warning(extra, f"the model's input at {location(fi, line)} was {len(shape)}-D: channels_last is "
                               "for 4-D image batches, convert a 4-D input yourself")
        elif isinstance(arg, cst.Name):
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


def _names_read(node) -> set[str]:
    """Every dotted name the statement reads, with its prefixes (``outputs.loss`` → also
    ``outputs``): what an assignment before it must bind to feed it."""
    out: set[str] = set()

    class Reader(cst.CSTVisitor):
        def visit_Attribute(self, n):
            name = dotted_name(n)
            if name:
                parts = name.split(".")
                out.update(".".join(parts[:k]) for k in range(1, len(parts) + 1))
                return False
            return True

        def visit_Name(self, n):
            out.add(n.value)

    node.visit(Reader())
    return out


def _names_bound(stmt) -> set[str]:
    """Names a simple statement assigns (``a = ``, ``a, b = ``, ``a += ``, ``self.x = ``)."""
    if not isinstance(stmt, cst.SimpleStatementLine):
        return set()
    out: set[str] = set()

    def add(t):
        if isinstance(t, (cst.Tuple, cst.List)):
            for el in t.elements:
                add(el.value)
        elif isinstance(t, cst.StarredElement):
            add(t.value)
        elif dotted_name(t):
            out.add(dotted_name(t))
    for small in stmt.body:
        if isinstance(small, cst.Assign):
            for t in small.targets:
                add(t.target)
        elif isinstance(small, (cst.AugAssign, cst.AnnAssign)):
            add(small.target)
    return out


def _last_feeding(block: list, i: int, j: int) -> int:
    """The last statement in block[i+1:j] that the backward at block[j] depends on (through
    the names it binds), or i: autocast covers the forward and the loss, not the logging,
    ``.item()`` reads or ``zero_grad()`` between them and the backward."""
    needed = _names_read(block[j])
    last = i
    for k in range(j - 1, i, -1):
        if _names_bound(block[k]) & needed:
            needed |= _names_read(block[k])
            last = max(last, k)
    return last


def amp(ctx: PatchContext, fix: dict, p: dict) -> dict:
    """Autocast around the model call and the loss computed from it, stopping before
    ``.backward()`` and before statements the loss does not depend on. The script's own AMP
    switch is turned on instead where it runs the dtype the trial measured (advisor.patch.switches),
    and always for the script's form (``form: "script"``, its own trial)."""
    want = p.get("dtype") or "bfloat16"
    via = switches.use(ctx, "amp", p, "amp",
                       form_ok=lambda s: s.form.get("dtype") == want and (want != "float16" or s.form.get("scaler")))
    if via is not None:
        return {**via, "changes_numerics": True}
    if p.get("form") == "script":
        raise SkipFix(f"the script's own AMP switch {p.get('switch')} was not found to turn on")
    f, line, stmt = _input_stmt(ctx, fix)
    node = f.parent.get(f.parent.get(stmt))      # stmt → its block → else: of an `if <switch>:`
    if isinstance(node, cst.Else) and isinstance(f.parent.get(node), cst.If) and \
            _does(f, f.parent[node].body, "autocast"):
        note = _switch_on(ctx, f, f.parent[node])
        if note is not None:
            _switch_dtype(ctx, f, f.parent[node], p.get("dtype") or "bfloat16", note)
            return {**note, "changes_numerics": True}
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
            last = block[_last_feeding(block, i, j)]
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
    if _names_bce(ctx, f):   # refused under autocast: float32 outside it, as the trial ran it
        from advisor.runtime.amp_source import BCE_FLOAT32, BCE_INSTALL

        ctx.insert_after_imports(f, [BCE_FLOAT32, BCE_INSTALL], PRIO_INPUT, lines_before=2)
        extra["bce_float32"] = True
    if dtype == "float16":
        add_warning(extra, "float16 autocast also needs torch.amp.GradScaler around backward and step: not added")
    span = f"{f.line_of(stmt)}-{f.pos[last].end.line}"
    return applied(location(f, f.line_of(stmt)), [f"with {head}: around lines {span}"], changes_numerics=True, **extra)


def _names_bce(ctx: PatchContext, f: SourceFile) -> bool:
    """The script's code that ran (f where no lines were recorded) names binary cross-entropy:
    nn.BCELoss or F.binary_cross_entropy (not its with_logits form, which autocast allows)."""
    for path in ctx.ran_files() or [f.path]:
        try:
            with open(path, encoding="utf-8") as fh:
                if _BCE.search(fh.read()):
                    return True
        except (OSError, UnicodeDecodeError):
            continue
    return False


_BCE = re.compile(r"\bBCELoss\b|\bbinary_cross_entropy\s*\(")


def torch_compile(ctx: PatchContext, fix: dict, p: dict) -> dict:
    """``model.compile()`` in place (Module.compile): ``model = torch.compile(model)`` would bind
    the name to a wrapper whose state_dict keys start with ``_orig_mod.``, and the script's
    checkpoints would no longer load into the plain model. The script's own compile switch is
    turned on instead where the trial compiled with the default mode (advisor.patch.switches)."""
    via = switches.use(ctx, "torch-compile", p, "torch-compile", form_ok=lambda s: p.get("mode") in (None, "default"))
    if via is not None:
        return via
    f, stmt, target = model_stmt(ctx, fix, "model.compile()", key="first_model")   # what the trial compiled
    mode = p.get("mode") if p.get("mode") != "default" else None
    code = f'{target}.compile(mode="{mode}")' if mode else f"{target}.compile()"
    ctx.insert(f, stmt, code, after=True, prio=PRIO_COMPILE)
    return applied(location(f, f.line_of(stmt)), [f"{code} after {location(f, f.line_of(stmt))}"])
