"""patch.verification (advisor.verify's result) in words, for the terminal and the HTML report."""

from __future__ import annotations

from advisor.contracts import Verification


def summary_line(v: Verification) -> str:
    """The headline, in words: "verified as plain python: 1,234 samples/s (2.40x, 96% of the stack)",
    a sequence model's real tokens a second after its samples."""
    status = v.get("status")
    if status in ("not applied", "failed"):
        return f"fixes.patch as plain python: {status} ({v.get('error')})"
    parts = []
    if v.get("speedup_vs_baseline"):
        parts.append(f"{v['speedup_vs_baseline']:.2f}x")
    if v.get("of_stack"):
        parts.append(f"{v['of_stack'] * 100:.0f}% of the stack"
                     + (" as estimated" if v.get("stack_estimated") else "")
                     + (f", within the {v['within_noise']:.0%} run-to-run band" if v.get("within_noise") else "")
                     + (f"; timed once: {v['timed_once']}" if v.get("timed_once") else ""))
    rate = f"{v.get('samples_per_s') or 0:,.0f} samples/s" \
        + (f", {v['tokens_per_s']:,.0f} tokens/s" if v.get("tokens_per_s") else "")
    missed = sum(1 for c in v.get("checks") or [] if c.get("took_effect") is False)
    head = {"verified": "verified as plain python",
            "partial": f"fixes.patch as plain python: partial ({missed} edit{'s' if missed != 1 else ''} did not take "
                       "effect)"}.get(status, "fixes.patch as plain python falls short")
    return f"{head}: {rate} ({', '.join(parts)})" if parts else f"{head}: {rate}"


def shortfalls(v: Verification) -> list[str]:
    """What did not take, each with its place in the user's files."""
    out = []
    for c in v.get("checks") or []:
        if c.get("took_effect") is False:
            at = f" at {c['where']}" if c.get("where") else ""
            why = f": {c['reason']}" if c.get("reason") else ""
            out.append(f"{c['fix']}: the edit{at} did not take effect (expected {c['expected']}, "
                       f"observed {c['observed']}){why}")
    return out
