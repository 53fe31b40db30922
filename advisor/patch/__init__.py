"""Accepted fixes → the equivalent edit of the user's script, as one unified diff.

Trials apply fixes at run time (advisor.interventions) and never touch the user's files.
This package writes the source edit a user would make by hand, at the call sites the child
observed (config ``where``, docs/internals.md §1), and returns it as text that ``git apply``
and ``patch -p1`` accept from the directory holding the script (or from ``root``):

    diff, notes = make_patch("train.py", [{"intervention": "set-to-none", "params": {}}], config)

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
from collections.abc import Callable

from . import frameworks
from .core import PatchContext, SkipFix
from .dali_fix import dali
from .ddp_fix import ddp
from .flag_fixes import cudnn_benchmark, fused_optimizer, set_to_none, tf32
from .loader_fixes import (
    LR_COMMENT,
    batch_size,
    dataloader,
    precompute_samples,
    preload_dataset,
)
from .model_fixes import amp, channels_last, torch_compile
from .sync_fixes import defer_syncs

__all__ = ["LR_COMMENT", "make_patch", "patch_for"]

# intervention name → its editor: (context, fix, fix's params) → note; raises SkipFix when it cannot be placed
_EDITORS: dict[str, Callable[[PatchContext, dict, dict], dict]] = {
    "set-to-none": set_to_none,
    "fused-optimizer": fused_optimizer,
    "cudnn-benchmark": cudnn_benchmark,
    "tf32": tf32,
    "dataloader-workers": dataloader,
    "pin-memory": dataloader,
    "precompute-samples": precompute_samples,
    "preload-dataset": preload_dataset,
    "dali": dali,
    "ddp": ddp,
    "batch-size": batch_size,
    "channels-last": channels_last,
    "amp": amp,
    "torch-compile": torch_compile,
    "defer-syncs": defer_syncs,
}


def make_patch(script_path: str, fixes: list[dict], config: dict, root: str | None = None,
               *, cwd: str | None = None, executed: dict | None = None,
               texts: dict | None = None, argv: list[str] | None = None) -> tuple[str, list[dict]]:
    """Return (unified diff, one note per fix). ``config`` is the child's observed config;
    its ``where`` paths are resolved against ``cwd`` (default: the current directory), the
    script's directory and ``root`` (default: the script's directory; diff paths are
    relative to it). ``executed``: the run's executed lines (run.json "executed_lines"):
    edits are anchored only to statements that ran. ``texts``, when given, receives each
    patched file's new text by its relative path. ``argv``: the script's arguments (a flag
    the user passes is changed on the command line, not in the code)."""
    cwd = os.path.realpath(cwd or os.getcwd())
    script = os.path.realpath(os.path.join(cwd, script_path))
    root = os.path.realpath(os.path.join(cwd, root)) if root else os.path.dirname(script)
    ctx = PatchContext(script=script, root=root, cwd=cwd, config=config or {}, executed=executed or {},
                      argv=[str(a) for a in argv or []])
    notes: list[dict] = []
    try:    # a loop inside transformers' or Lightning's Trainer: fixes are arguments of its call
        framework = frameworks.framework_of(ctx)
    except Exception:  # noqa: BLE001 - detection must never cost the generic edits
        framework = None
    for fix in _with_required(list(fixes or []), ctx.config):
        fix = fix or {}
        name = fix.get("intervention")
        editor = _EDITORS.get(name)
        if editor is None:
            notes.append({"intervention": name, "applied": False,
                          "reason": f"advisor has no source edit for {name!r}"})
            continue
        mark, text_mark = len(ctx.edits), {k: dict(v) for k, v in ctx.text_edits.items()}
        try:
            params = dict(fix.get("params") or {})
            note = frameworks.edit(ctx, fix, params, framework) if framework else None
            if note is None:    # not a framework-level fix: the generic editor
                note = editor(ctx, fix, params)
        except Exception as e:  # noqa: BLE001 - a bad site must not take the whole patch down
            del ctx.edits[mark:]    # a fix that is not placed leaves no edit behind
            ctx.text_edits = text_mark
            reason = str(e) if isinstance(e, SkipFix) else \
                f"internal error while placing the edit: {type(e).__name__}: {e}"
            note = {"applied": False, "reason": reason}
        if fix.get("required_by"):
            note = {**note, "required_by": fix["required_by"], "why": fix.get("reason")}
        notes.append({"intervention": name, **note})
    _mark_superseded(notes)
    diff = ctx.render(notes)
    if texts is not None:   # the patched files' texts, for advisor.verify
        texts.update(ctx.texts)
    return diff, notes


# A fix whose edit takes another's place at the same call: the preloaded dataset's DataLoader
# is written with num_workers=0, pin_memory=False, whatever the loader fixes kept before it.
SUPERSEDES = {"preload-dataset": ("dataloader-workers", "pin-memory")}


def _mark_superseded(notes: list[dict]) -> None:
    """A kept fix whose arguments a later edit replaced says so: its note listed num_workers=8
    while the diff (preload-dataset) wrote num_workers=0."""
    placed = {n.get("intervention") for n in notes if n.get("applied")}
    for n in notes:
        by = next((k for k, v in SUPERSEDES.items() if n.get("intervention") in v and k in placed), None)
        if by and n.get("applied"):
            n["superseded_by"] = by
            text = f"superseded by {by}: its DataLoader arguments are not in the diff, only its non_blocking copies"
            n["warning"] = f"{n['warning']}; {text}" if n.get("warning") else text


patch_for = make_patch

CUDA_GRAPHS_GRADS = ("CUDA graphs (torch.compile mode=\"reduce-overhead\") need gradients set to None "
                     "between steps: kept with set_to_none=False, backward reads a gradient the next "
                     "replay has overwritten, and the step fails")


def _with_required(fixes: list[dict], config: dict) -> list[dict]:
    """Edits another edit needs as code. At run time advisor compiles the model at its first
    call, after an eager step, so the gradients are plain tensors the graphs only add into;
    the edited script compiles it from the start, and with zero_grad(set_to_none=False) its
    gradients would be CUDA graph outputs, overwritten by the next replay."""
    names = {(f or {}).get("intervention") for f in fixes}
    graphs = any((f or {}).get("intervention") == "torch-compile"
                 and ((f or {}).get("params") or {}).get("mode") == "reduce-overhead" for f in fixes)
    zero_grad = (config.get("zero_grad") or {}).get("value") or {}
    if graphs and "set-to-none" not in names and zero_grad.get("set_to_none") is False:
        fixes.append({"intervention": "set-to-none", "params": {}, "required_by": "torch-compile",
                      "reason": CUDA_GRAPHS_GRADS})
    return fixes
