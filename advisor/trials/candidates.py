"""Which trials a finding asks for: a finding's fix becomes one or more concrete candidates
(worker counts to compare, a fallback when the first choice cannot apply or does not pay)."""

from __future__ import annotations

from dataclasses import dataclass, field

from advisor import fixes


@dataclass
class Candidate:
    name: str                       # intervention name
    params: dict = field(default_factory=dict)
    origin: str | None = None       # rule code that proposed it
    est_gain_ms: float | None = None
    group: str | None = None        # candidates of one group compete; the best is kept (the
                                    # trial's name shows the group's parameter values)
    fallback: Candidate | None = None  # tried next when this one's verdict is in fallback_when
    # "skipped": cannot apply to the script; "failed": crashed (a dataset preloaded on the
    # device that runs it out of memory); "rejected": not faster, or numerics.
    fallback_when: tuple[str, ...] = ("skipped", "failed")
    members: list[Candidate] = field(default_factory=list)  # a bundle: fixes trialled as one rung
    # a rung of several fixes that failed or cannot apply here: these are trialled each alone
    # instead (rungs.split), in this order (the fix that ranked first, first)
    split: list[Candidate] = field(default_factory=list)
    alone: bool = False             # split from such a rung: no bundle, partner or riders join it
    gain_is_upper_bound: bool = False  # est_gain_ms is the most it can give (rungs.pick)
    note: str | None = None            # why this rung holds what it does (a pair, a bundle, riders)

    @property
    def key(self) -> str:
        if self.members:
            return " + ".join(m.key for m in self.members)
        extra = ",".join(f"{k}={v}" for k, v in sorted(self.params.items()) if not k.startswith("_"))
        return f"{self.name}({extra})" if extra else self.name

    @property
    def parts(self) -> list[Candidate]:
        """The fixes this rung applies: a bundle's members, else itself."""
        return list(self.members) or [self]

    def as_specs(self) -> list[dict]:
        return [{"name": p.name, "params": dict(p.params)} for p in self.parts]


def expand(fix: dict, origin: str | None, gain: float | None, environment: dict) -> list[Candidate]:
    """One finding's fix → the concrete trials that test it (its Fix.candidates); none for a
    suggestion, a name advisor does not know, or a proposal marked suggest_only."""
    name = fix.get("intervention")
    if fix.get("suggest_only") or not fixes.known(name) or fixes.get(name).kind == "suggestion":
        return []
    params = {k: v for k, v in (fix.get("params") or {}).items() if v is not None}
    return [_candidate(name, plan, origin, gain) for plan in fixes.get(name).candidates(params, environment)]


def _candidate(name: str, plan: dict, origin: str | None, gain: float | None) -> Candidate:
    plan = dict(plan)
    fallback = plan.pop("fallback", None)
    if fallback is not None:
        plan["fallback"] = _candidate(fallback.pop("name", name), fallback, origin, gain)
    return Candidate(name, dict(plan.pop("params", {})), origin, gain, **plan)


def candidates_from_findings(findings: list[dict], environment: dict, only: set[str] | None) -> list[Candidate]:
    out: list[Candidate] = []
    for f in findings:
        fix = f.get("fix") or {}
        for c in expand(fix, f.get("code"), f.get("estimated_gain_ms"), environment):
            c.gain_is_upper_bound = bool(f.get("gain_is_upper_bound"))
            if only is None or c.name in only:
                out.append(c)
    if only:  # --fix names a fix no rule proposed: trial it anyway (a bound is the ceiling's, never a rung)
        named = {c.name for c in out}
        for name in sorted(only - named - set(fixes.names("bound", "reference"))):
            out.extend(expand({"intervention": name}, None, None, environment))
    return out
