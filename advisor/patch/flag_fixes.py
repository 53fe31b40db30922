"""Fixes that flip a flag: ``zero_grad(set_to_none=True)``, a fused (or foreach) optimizer,
``cudnn.benchmark = True`` and TF32 matmuls/convolutions."""

from __future__ import annotations

import libcst as cst

from .call_args import (
    code_of,
    dotted_name,
    find_arg,
    is_literal,
    last_name,
    passes_literal,
    remove_arg,
    rename_arg,
    set_arg,
)
from .core import (
    PRIO_CUDNN,
    PRIO_TF32,
    PatchContext,
    SkipFix,
    SourceFile,
    applied,
    location,
)

# Used when torch cannot be imported to ask the optimizers themselves.
_FUSED_OPTIMIZERS = {"SGD", "Adam", "AdamW", "Adagrad"}
_FOREACH_OPTIMIZERS = _FUSED_OPTIMIZERS | {"RMSprop", "Adamax", "NAdam", "RAdam", "Adadelta", "ASGD", "Rprop"}


def set_to_none(ctx: PatchContext, fix: dict, p: dict) -> dict:
    f, line = ctx.site("zero_grad", fix)
    calls = f.calls_at(line, lambda c: last_name(c.func) == "zero_grad")
    if not calls:
        raise SkipFix(f"no zero_grad(...) call at {location(f, line)}")
    call = calls[0]
    found = find_arg(call, "set_to_none", 0)
    if found is None:
        raise SkipFix(f"zero_grad() at {location(f, line)} already uses the default set_to_none=True")
    if is_literal(found[1].value, True):
        raise SkipFix(f"zero_grad at {location(f, line)} already passes set_to_none=True")
    ctx.on_node(f, call, lambda c: set_arg(c, "set_to_none", "True", 0))
    return applied(location(f, f.line_of(call)), ["set_to_none=True"])


def _optimizer_classes() -> tuple[set[str], set[str]]:
    """(classes taking fused=, classes taking foreach=) among torch.optim's optimizers."""
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


def fused_optimizer(ctx: PatchContext, fix: dict, p: dict) -> dict:
    f, line = ctx.site("optimizer", fix)
    fused, foreach = _optimizer_classes()
    observed = ((ctx.config.get("optimizer") or {}).get("value") or {}).get("class")
    known = {observed} if observed else fused | foreach
    calls = f.calls_at(line, lambda c: last_name(c.func) in known)
    if not calls:
        raise SkipFix(f"no torch.optim.{observed or '<Optimizer>'}(...) call at {location(f, line)}")
    call = calls[0]
    cls = last_name(call.func)
    here = location(f, f.line_of(call))
    if cls in fused:
        if passes_literal(call, "fused", True):
            raise SkipFix(f"{cls} at {here} already passes fused=True")

        stars = [a for a in call.args if a.star == "**"]
        if stars and find_arg(call, "fused") is None:
            # **extra_args may hold fused= already (nanoGPT: dict(fused=True) if use_fused):
            # a second fused= would raise, so the entry goes into the unpacked dict
            idx = call.args.index(stars[-1])

            def edit(c: cst.Call) -> cst.Call:
                args = list(c.args)
                args[idx] = args[idx].with_changes(value=cst.parse_expression(f'{{**{code_of(args[idx].value)}, "fused": True}}'))
                return remove_arg(c.with_changes(args=args), "foreach")
            ctx.on_node(f, call, edit)
            return applied(here, [f'**{{**{code_of(stars[-1].value)}, "fused": True}}'],
                           warning="the optimizer takes **kwargs: fused=True is set inside them")

        def edit(c: cst.Call) -> cst.Call:
            if find_arg(c, "foreach") is not None and find_arg(c, "fused") is None:
                return rename_arg(c, "foreach", "fused", "True")
            return set_arg(remove_arg(c, "foreach"), "fused", "True")
        ctx.on_node(f, call, edit)
        return applied(here, ["fused=True (foreach removed)" if find_arg(call, "foreach") else "fused=True"])
    if cls in foreach:
        if passes_literal(call, "foreach", True):
            raise SkipFix(f"{cls} at {here} already passes foreach=True and has no fused implementation")
        ctx.on_node(f, call, lambda c: set_arg(c, "foreach", "True"))
        return applied(here, [f"foreach=True ({cls} has no fused implementation)"])
    raise SkipFix(f"{cls} has neither fused nor foreach")


def _assignments(f: SourceFile, suffix: str, line: int | None = None,
                 ctx: PatchContext | None = None) -> list[cst.Assign]:
    """Every ``<...>.suffix = value`` in the file (suffix like "cudnn.benchmark"), or only those
    spanning ``line``; with ``ctx``, only those that ran (``cudnn.benchmark = False`` in an ``if
    args.seed:`` block the run skipped is the user's reproducible mode, and editing it changes
    nothing in the run the user does)."""
    out = []
    for st, _, _ in f.stmts:
        if ctx is not None and ctx.ran(f, st) is False:
            continue
        if isinstance(st, cst.SimpleStatementLine):
            for small in st.body:
                if isinstance(small, cst.Assign) and any(
                        (dotted_name(t.target) or "").endswith(suffix) for t in small.targets):
                    out.append(small)
    if line is not None:
        out = [a for a in out if f.pos[a].start.line <= line <= f.pos[a].end.line]
    return out


def _set_true(node: cst.Assign) -> cst.Assign:
    return node.with_changes(value=cst.Name("True"))


def cudnn_benchmark(ctx: PatchContext, fix: dict, p: dict) -> dict:
    site = ctx.site("cudnn.benchmark", fix, required=False)
    if site is not None:
        f, line = site
        found = _assignments(f, "cudnn.benchmark", line) or _assignments(f, "benchmark", line)
        if not found:
            raise SkipFix(f"no assignment to cudnn.benchmark at {location(f, line)}")
    else:
        f = ctx.script_file()
        found = _assignments(f, "cudnn.benchmark", ctx=ctx)
    if found:
        todo = [a for a in found if not is_literal(a.value, True)]
        if not todo:
            raise SkipFix("cudnn.benchmark is already set to True")
        for a in todo:
            ctx.on_node(f, a, _set_true)
        return applied(location(f, f.line_of(todo[0])), ["cudnn.benchmark = True"])
    anchor = ctx.after_imports(f, "torch.backends.cudnn.benchmark = True", PRIO_CUDNN)
    return applied(location(f, f.line_of(anchor)), ["torch.backends.cudnn.benchmark = True after the imports"])


def _set_false(node: cst.Assign) -> cst.Assign:
    return node.with_changes(value=cst.Name("False"))


def no_cudnn_benchmark(ctx: PatchContext, fix: dict, p: dict) -> dict:
    """The script's own ``cudnn.benchmark = True`` set to False where it is made (the default is
    off: a script that never sets it has nothing to change)."""
    site = ctx.site("cudnn.benchmark", fix, required=False)
    if site is not None:
        f, line = site
        found = _assignments(f, "cudnn.benchmark", line) or _assignments(f, "benchmark", line)
    else:
        f = ctx.script_file()
        found = _assignments(f, "cudnn.benchmark", ctx=ctx)
    todo = [a for a in found if not is_literal(a.value, False)]
    if not todo:
        raise SkipFix("no assignment turns cudnn.benchmark on" + (f" at {location(f, site[1])}" if site else ""))
    for a in todo:
        ctx.on_node(f, a, _set_false)
    return applied(location(f, f.line_of(todo[0])), ["cudnn.benchmark = False"])


def tf32(ctx: PatchContext, fix: dict, p: dict) -> dict:
    script = ctx.script_file()
    edits, first = [], None
    for key, suffix, code in (("tf32.matmul", "matmul.allow_tf32", "torch.backends.cuda.matmul.allow_tf32 = True"),
                              ("tf32.cudnn", "cudnn.allow_tf32", "torch.backends.cudnn.allow_tf32 = True")):
        try:
            site = ctx.site(key, fix, required=False)
        except SkipFix:
            site = None
        found: list = []
        if site is not None:
            f, line = site
            found = _assignments(f, suffix, line)
        if not found:
            f = script
            found = _assignments(f, suffix, ctx=ctx)
        if found:
            for a in found:
                if not is_literal(a.value, True):
                    ctx.on_node(f, a, _set_true)
            edits.append(f"{suffix} = True at {location(f, f.line_of(found[0]))}")
            first = first or location(f, f.line_of(found[0]))
        else:
            anchor = ctx.after_imports(script, code, PRIO_TF32)
            edits.append(code + " after the imports")
            first = first or location(script, script.line_of(anchor))
    # set_float32_matmul_precision("highest") would switch matmul TF32 back off
    for call, _, _ in script.calls:
        if last_name(call.func) == "set_float32_matmul_precision" and call.args and \
                isinstance(call.args[0].value, cst.SimpleString) and call.args[0].value.evaluated_value == "highest":
            ctx.on_node(script, call, lambda c: set_arg(c, "precision", '"high"', 0))
            edits.append(f'set_float32_matmul_precision("high") at {location(script, script.line_of(call))}')
    return applied(first, edits)
