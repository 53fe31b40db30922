"""The script's own form of a fix as a trial of its own (advisor.patch.switches): where the
script has a switch that turns the fix on in its own code in another form than advisor's (its
``--amp`` runs float16 autocast with a GradScaler, advisor's amp bfloat16), both are trialled,
in one group, and the faster is kept; on a tie the script's own, which needs no edit.

A script-form trial runs the script with the switch's command-line change (``trial_args``) and
applies nothing itself (its fix's run-time part returns at once for ``form: "script"``)."""

from __future__ import annotations

import dataclasses

from advisor.trials.candidates import Candidate

FIXES = ("amp",)      # the fixes whose script form can differ from advisor's


def add(queue: list[Candidate], script: str, script_args: list[str], baseline: dict) -> list[Candidate]:
    """``queue`` with each fix of FIXES followed by its script forms, the two in one group."""
    if not any(c.name in FIXES and not c.members for c in queue):
        return queue
    from advisor.patch import switches

    try:
        ctx = switches.context(script, script_args, baseline)
    except Exception:  # noqa: BLE001 - a question about the script never stops the trials
        return queue
    out: list[Candidate] = []
    for c in queue:
        out.append(c)
        if c.name not in FIXES or c.members or c.params.get("form") == "script":
            continue
        try:
            plans = switches.script_forms(ctx, c.name, c.params)
        except Exception:  # noqa: BLE001
            plans = []
        if plans:
            c.group = c.group or c.name
            out.extend(dataclasses.replace(c, params=dict(p["params"]), fallback=None) for p in plans)
    return out
