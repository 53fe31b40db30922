"""Which trials a finding asks for: a finding's fix becomes one or more concrete candidates
(worker counts to compare, a fallback when the first choice cannot apply or does not pay)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from advisor import interventions

# Fixes a rule may name that advisor cannot apply at run time: shown as suggestions.
SUGGEST_ONLY = {"uint8-inputs", "expandable-segments", "grad-scaler",
                "overlap-communication", "cuda-graphs", None}


# Interventions that measure a bound or a reference, not a fix: never a rung of the ladder
# (advisor.trials.ceiling, advisor.trials.scaling).
BOUNDS = {"cached-batch", "one-gpu"}


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
    """One finding's fix → the concrete trials that test it."""
    name = fix.get("intervention")
    if name in SUGGEST_ONLY or fix.get("suggest_only") or name not in interventions.MODULES:
        return []
    params = {k: v for k, v in (fix.get("params") or {}).items() if v is not None}
    if name == "dataloader-workers":
        cpus = int(environment.get("cpu_count") or os.cpu_count() or 2)
        # A few values, not a sweep: each trial is a fresh process. Half the cores and all
        # of them (up to 8: beyond that workers mostly contend for the same memory bandwidth).
        values = sorted({max(2, min(8, cpus) // 2), max(2, min(8, cpus))})
        if params.get("num_workers"):  # a rule's own count (ADV118: twice the workers, random transforms)
            values = [int(params["num_workers"])]
        pin = bool(environment.get("gpu_count"))
        return [Candidate(name, {"num_workers": v, "pin_memory": pin}, origin, gain, group="dataloader-workers")
                for v in values]
    if name == "ddp":   # one process per GPU: every GPU the machine has (2 at least)
        n = int(params.get("nproc") or max(2, int(environment.get("gpu_count") or 0)))
        return [Candidate(name, {"nproc": n}, origin, gain)]
    if name == "pin-memory":
        return [Candidate("pin-memory", {"pin_memory": True}, origin, gain)]
    if name == "batch-size":
        return [Candidate(name, {"factor": f}, origin, gain, group="batch-size") for f in (2, 4)]
    if name == "preload-dataset":
        # Host-side storage is the fallback when the samples cannot live on the device
        # (refused, or the trial crashed: out of device memory). Not when preload ran and was
        # not faster: precompute takes away only part of what preload does (the per-sample
        # work, not the collate and the copy).
        return [Candidate(name, params, origin, gain, fallback=Candidate("precompute-samples", {}, origin, gain))]
    if name == "amp":
        return [Candidate(name, {"dtype": params.get("dtype", "bfloat16")}, origin, gain)]
    if name == "torch-compile":
        if params.get("mode"):
            return [Candidate(name, {"mode": params["mode"]}, origin, gain)]
        if not environment.get("gpu_count"):
            return [Candidate(name, {"mode": "default"}, origin, gain, group="torch-compile")]
        # On a GPU, CUDA graphs (reduce-overhead) take the launch cost away too; plain compile
        # is their fallback, tried only when they cannot apply, crash or are not accepted (once
        # reduce-overhead is kept, default on top of it would not be stacked anyway, and
        # trialling it just to compare cost a 40 s process on an H100 for a -8.8% result).
        plain = Candidate(name, {"mode": "default"}, origin, gain, group="torch-compile")
        return [Candidate(name, {"mode": "reduce-overhead"}, origin, gain, group="torch-compile",
                          fallback=plain, fallback_when=("skipped", "failed", "rejected"))]
    return [Candidate(name, {}, origin, gain)]


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
        for name in sorted(only - named - BOUNDS):
            out.extend(expand({"intervention": name}, None, None, environment))
    return out
