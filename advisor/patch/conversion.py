"""Where a model conversion goes (``model = _float8_training(model)``, ``_checkpoint_blocks``):
after the statement that moved or bound the model in the user's code; where the loop is a
framework's, before the call that hands the model to it: Lightning's ``trainer.fit(model)``, a
Hugging Face ``Trainer(model=model)``; before a compile of it. The conversions keep the model's
Parameter objects, so an optimizer made from them earlier goes on updating them, as in the trial,
which converts the model at its first training call."""

from __future__ import annotations

import libcst as cst

from .call_args import find_arg
from .core import PRIO_COMPILE, PatchContext, SkipFix, applied, location
from .model_fixes import model_stmt
from .placement import define_before


def convert_model(ctx: PatchContext, fix: dict, function: str, source: str | None = None, *,
                  trainers: list | None = None, **extra) -> dict:
    """``NAME = function(NAME)`` on the model (``source``, the function's text, at module level):
    before ``trainer.fit`` for the Lightning Trainer calls given, else after the model's own
    statement, else before the transformers ``Trainer(model=NAME)`` that ran. The note."""
    what = f"model = {function}(model)"
    if trainers is not None:
        from .frameworks import _fit

        f, stmt, _call, arg = _fit(ctx, trainers, what)
        site, name, after = stmt, arg.value.value, False
    else:
        try:
            f, site, name = model_stmt(ctx, fix, what)
            after = True
        except SkipFix as own:
            f, site, name = _handed_to_trainer(ctx, own)
            after = False
    if source is not None:
        define_before(ctx, f, site, source)
    code = f"{name} = {function}({name})"
    # after the model's statement: before a compile of it there (PRIO_COMPILE, inserted after
    # the same statement), so the compiled graphs hold the converted layers
    ctx.insert(f, site, code, after=after, prio=PRIO_COMPILE - 1)
    at = location(f, f.line_of(site))
    defined = f" (function {function} at module level)" if source is not None else ""
    return applied(at, [f"{code} {'after' if after else 'before'} {at}{defined}"], **extra)


def _handed_to_trainer(ctx: PatchContext, why: SkipFix):
    """(file, statement, name) of the plain name given as ``model`` to a Hugging Face Trainer
    call that ran; re-raises ``why`` where there is none (not a Trainer script)."""
    from .frameworks import _calls

    for t in _calls(ctx):
        if t.framework == "transformers" and t.kind == "trainer":
            found = find_arg(t.call, "model", 0)
            if found is not None and isinstance(found[1].value, cst.Name):
                return t.file, t.file.stmt_at(t.file.line_of(t.call)), found[1].value.value
    raise why
