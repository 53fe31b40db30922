"""``defer-syncs``: the script's per-step ``.item()`` reads become device tensors.

At run time advisor defers each ``.item()`` of the script's own code to the first use of its
value (advisor.interventions.defer_syncs); the edit a user makes is to keep the value on the
device, ``running_loss += loss.detach()``, and read it back where it is printed (a 0-dim
tensor formats like a number: ``f"{running_loss / n:.4f}"``). Only the call sites observed
reading a device tensor are edited.
"""

from __future__ import annotations

import libcst as cst

from .core import PatchContext, SkipFix, applied, location


def _is_item_call(c: cst.Call) -> bool:
    return isinstance(c.func, cst.Attribute) and c.func.attr.value == "item" and not c.args


def _detach(c: cst.Call) -> cst.Call:
    return c.with_changes(func=c.func.with_changes(attr=cst.Name("detach")))


def defer_syncs(ctx: PatchContext, fix: dict, p: dict) -> dict:
    sites = ((ctx.config.get("item_calls") or {}).get("value") or {}).get("sites") or {}
    device_sites = [w for w, s in sites.items() if s.get("device")]
    if not device_sites:
        raise SkipFix("no .item() on a device tensor was observed in the script's code")
    done: list[str] = []
    for where in device_sites:
        try:
            f, line = ctx.locate(where, "the .item() site")
        except SkipFix:  # a site outside the editable files: the others are still edited
            continue
        for call in f.calls_at(line, _is_item_call):
            ctx.on_node(f, call, _detach)
            done.append(location(f, f.line_of(call)))
    if not done:
        raise SkipFix(f"no .item() call found at {', '.join(device_sites)}")
    return applied(done[0], [f".item() → .detach() at {w}" for w in done], edits_at=done,
                   warning="the values stay 0-dim tensors on the device until printed (format them "
                           "as numbers; call .item() where a Python number is needed, rarely)")
