"""Accepted fixes → the equivalent edit of the user's script, as one unified diff.

Trials apply fixes at run time (advisor.interventions) and never touch the user's files.
This package writes the source edit a user would make by hand, at the call sites the child
observed (config ``where``, docs/internals.md §1), and returns it as text that ``git apply``
and ``patch -p1`` accept from the directory holding the script (or from ``root``):

    diff, notes = advisor.fixes.make_patch("train.py", [{"intervention": "set-to-none", "params": {}}], config)

Each fix holds its own edit (advisor.fixes: ``Fix.edit``, its Transformers and Lightning forms);
this package is the machinery they share, handed the registry by advisor.fixes.make_patch.

Edits are made on a libcst tree, so formatting and comments survive. Every fix is first
resolved against the ORIGINAL tree (line numbers → nodes via PositionProvider) and
recorded as an edit of an original node; one transformer pass then applies all of them,
so several fixes on one file (even on one call) compose into one diff whatever their
order (core.py). Nothing is written: files are read, the diff is returned.

Each note is {"intervention", "applied": True, "where": "path:LINE", "edits": [...]} or
{"intervention", "applied": False, "reason": ...}; a fix that cannot be placed (unknown
intervention, site not observed, site not in an editable file, nothing to change) is
reported, never raised.
"""

from __future__ import annotations

import os

from advisor.contracts import PatchNote

from . import frameworks
from .core import PatchContext, SkipFix
from .loader_fixes import LR_COMMENT

__all__ = ["LR_COMMENT", "make_patch"]


def make_patch(script_path: str, fixes: list[dict], config: dict, root: str | None = None,
               *, registry, cwd: str | None = None, executed: dict | None = None,
               texts: dict | None = None, argv: list[str] | None = None,
               environ: dict | None = None) -> tuple[str, list[PatchNote]]:
    """Return (unified diff, one note per fix). ``registry``: the fixes' registry (get, known,
    trait), whose objects hold the edits. ``config`` is the child's observed config;
    its ``where`` paths are resolved against ``cwd`` (default: the current directory), the
    script's directory and ``root`` (default: the script's directory; diff paths are
    relative to it). ``executed``: the run's executed lines (run.json "executed_lines"):
    edits are anchored only to statements that ran. ``texts``, when given, receives each
    patched file's new text by its relative path. ``argv``: the script's arguments (a flag
    the user passes is changed on the command line, not in the code); ``environ``: the run's
    environment (default: this process's; a variable the run had set is changed on the
    command line too)."""
    cwd = os.path.realpath(cwd or os.getcwd())
    script = os.path.realpath(os.path.join(cwd, script_path))
    root = os.path.realpath(os.path.join(cwd, root)) if root else os.path.dirname(script)
    ctx = PatchContext(script=script, root=root, cwd=cwd, config=config or {}, executed=executed or {},
                      argv=[str(a) for a in argv or []], registry=registry,
                      environ=dict(os.environ if environ is None else environ))
    notes: list[PatchNote] = []
    try:    # a loop inside transformers' or Lightning's Trainer: fixes are arguments of its call
        framework = frameworks.framework_of(ctx)
    except Exception:  # noqa: BLE001 - detection must never cost the generic edits
        framework = None
    for fix in _with_required(registry, list(fixes or []), ctx.config):
        fix = fix or {}
        name = fix.get("intervention")
        if not registry.known(name):
            notes.append({"intervention": name, "applied": False,
                          "reason": f"advisor has no source edit for {name!r}"})
            continue
        mark, text_mark = len(ctx.edits), {k: dict(v) for k, v in ctx.text_edits.items()}
        try:
            params = dict(fix.get("params") or {})
            note = frameworks.edit(ctx, fix, params, framework) if framework else None
            if note is None:    # not a framework-level fix: the fix's own edit
                note = registry.get(name).edit(ctx, fix, params)
        except Exception as e:  # noqa: BLE001 - a bad site must not take the whole patch down
            del ctx.edits[mark:]    # a fix that is not placed leaves no edit behind
            ctx.text_edits = text_mark
            reason = str(e) if isinstance(e, SkipFix) else \
                f"internal error while placing the edit: {type(e).__name__}: {e}"
            note = {"applied": False, "reason": reason}
        if fix.get("required_by"):
            note = {**note, "required_by": fix["required_by"], "why": fix.get("reason")}
        notes.append({"intervention": name, **note})
    # a kept fix another placed fix supersedes: advisor.patch.supersede, around this call
    diff = ctx.render(notes)
    if texts is not None:   # the patched files' texts, for advisor.verify
        texts.update(ctx.texts)
    return diff, notes


def _with_required(registry, fixes: list[dict], config: dict) -> list[dict]:
    """The fixes, and the edits their edits need as code (Fix.requires), each with the fix that
    required it and why."""
    names = {(f or {}).get("intervention") for f in fixes}
    for f in list(fixes):
        name = (f or {}).get("intervention")
        if registry.known(name):
            for need in registry.get(name).requires((f or {}).get("params") or {}, config, names):
                fixes.append({**need, "required_by": name})
                names.add(need["intervention"])
    return fixes
