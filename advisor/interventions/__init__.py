"""The fixes' run-time parts, applied inside a trial's child process.

Each module here is the run-time part of a fix of advisor.fixes (its class names the module as
``runtime``) and defines ``describe(params) -> str``, ``not_applicable(config, environment,
params) -> str | None`` (why it cannot apply to this script, judged from the baseline's
observed config) and ``apply(params) -> None``, which patches torch in the child before the
user's script runs. The user's files are never edited: the fix's ``edit`` writes the equivalent
source edit into fixes.patch.
"""

from __future__ import annotations

# The note an intervention leaves when it finds at run time that it cannot apply
# (_patch.not_applied); the trials ladder (parent process, no torch) reads it.
NOT_APPLIED = "intervention not applied:"


def parse_specs(text: str) -> list[dict]:
    """``--apply`` syntax → [{"name", "params"}]: ``NAME[:KEY=VALUE...]``, comma-separated,
    e.g. ``amp:dtype=float16,channels-last,dataloader-workers:num_workers=8:pin_memory=true``.
    Raises ValueError with a one-line reason."""
    from advisor import fixes

    out = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        name, *pairs = item.split(":")
        if name not in fixes.names():
            raise ValueError(f"no fix named {name!r}; known: {', '.join(fixes.names())}")
        params = {}
        for pair in pairs:
            key, eq, value = pair.partition("=")
            if not eq or not key:
                raise ValueError(f"{item!r}: parameters are KEY=VALUE, got {pair!r}")
            params[key] = _value(value)
        out.append({"name": name, "params": params})
    return out


def _value(text: str):
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def apply_all(interventions: list[dict]) -> list[str]:
    """Apply each {"name", "params"} in order; returns one description line per fix."""
    from advisor import fixes

    lines = []
    for item in interventions:
        fix = fixes.get(item["name"])
        params = dict(item.get("params") or {})
        params.setdefault("_name", item["name"])
        fix.apply(params)
        lines.append(fix.describe(params))
    return lines
