"""What the ladder tries next: a queued fix becomes one rung on its own, together with the
small safe fixes queued beside it (a bundle), or together with the fix it needs to pay (a
partner); torch.compile waits behind the rest; a rejected fix comes back once the bottleneck
has moved; and the queue is what the rules find on the kept stack's trace (requeue).

The rungs follow the tutorials' ladders (AMP -> channels_last -> set_to_none/fused/benchmark)
and save processes, each a fresh run of the user's script, its start-up included.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from types import SimpleNamespace

from advisor import fixes
from advisor.trials import early
from advisor.trials.candidates import Candidate, candidates_from_findings

# Which fixes are bundled, go last, ride with compile or start slowly is each fix's own trait
# (advisor.fixes); docs/trials.md says why each trait exists and what was measured.


# A fix rejected as not faster is tried again when the bottleneck has moved since: the kept
# stack runs RETRY_SPEEDUP times faster (AMP or deferred syncs cannot show while the step waits
# for data), or the GPU's idle share of the step fell to RETRY_IDLE_DROP of what it was (a
# host-bound eager step became GPU-bound, as under CUDA graphs, while its speed-up stayed
# under RETRY_SPEEDUP: AMP would never be tried where it pays). docs/trials.md, "retries".
RETRY_SPEEDUP = 1.5
RETRY_IDLE_DROP = 0.5

# A fix that cuts only GPU time cannot show while the GPU waits for the host: rejected on such
# a step (its GPU idle at least HOST_BOUND_IDLE of it), it rides with torch-compile: one rung,
# compile alone its fallback, and no retry before then while the step stays host-bound.
HOST_BOUND_IDLE = 0.5


def rides(name: str, at: tuple[float, float | None]) -> bool:
    """Whether a fix rejected at `at` (reference ms/step, the GPU idle share of its own trace)
    rides with torch-compile."""
    return fixes.trait(name, "rides_with_compile") and at[1] is not None and at[1] >= HOST_BOUND_IDLE


def with_riders(cand: Candidate, riders: list[Candidate], out: Pick) -> Candidate:
    """cand (torch-compile) and the riders as one rung; cand alone is its fallback. cand as it
    is when that rung was tried already (its fallback, after the rung crashed or could not
    apply, is cand itself)."""
    rung = bundle([cand, *riders])
    if rung.key in out.tried:
        return cand
    # the riders were judged alone already (rejected on a host-bound step): compile alone is
    # what is left to try, not a split
    rung.split = []
    rung.fallback, rung.fallback_when = cand, ("skipped", "failed", "rejected")
    out.tried.discard(cand.key)  # its own trial is the fallback's
    out.tried.add(rung.key)
    rung.note = (f"{', '.join(r.key for r in riders)}: rejected while the GPU idled on a host-bound step; "
                 f"trialled with {cand.key}, which takes the launch cost away")
    out.notes.append(rung.note)
    return rung


def idle_share(analysis: dict | None) -> float | None:
    """The GPU's idle share of a profiled step, from a trial's trace (None: no trace)."""
    step = (analysis or {}).get("step_time_ms")
    idle = ((analysis or {}).get("breakdown") or {}).get("gpu_idle")
    return idle / step if step and idle is not None else None


def worth_retrying(then: tuple[float, float | None], now: tuple[float, float | None]) -> bool:
    """then: (reference ms/step, GPU idle share) when the fix was rejected; now: the same for
    the stack just kept."""
    (then_ms, then_idle), (now_ms, now_idle) = then, now
    if now_ms and then_ms >= RETRY_SPEEDUP * now_ms:
        return True
    return bool(then_idle) and now_idle is not None and now_idle <= RETRY_IDLE_DROP * then_idle


def take_bundle(cand: Candidate, queue: list[Candidate], done: set[str]) -> tuple[list[Candidate], list[Candidate]]:
    """(the bundle's members, the queue without them): cand and every other bundled fix
    queued and not yet tried (done: keys tried and names kept). One member: no bundle."""
    if not fixes.trait(cand.name, "bundled"):
        return [cand], queue
    members, rest, names = [cand], [], {cand.name}
    for q in queue:
        if fixes.trait(q.name, "bundled") and q.name not in names and q.key not in done and q.name not in done:
            members.append(q)
            names.add(q.name)
        else:
            rest.append(q)
    return members, rest


def bundle(members: list[Candidate]) -> Candidate:
    """One rung applying every member; its estimated gain is theirs together."""
    if len(members) == 1:
        return members[0]
    gains = [m.est_gain_ms for m in members if m.est_gain_ms is not None]
    origins = sorted({m.origin for m in members if m.origin})
    return Candidate("+".join(m.name for m in members), {}, origin=",".join(origins) or None,
                     est_gain_ms=sum(gains) if gains else None, members=list(members), split=list(members))


def split(rung: Candidate, judged_alone: set[str], kept: set[str]) -> list[Candidate]:
    """The fixes of a rung of several that failed (or cannot apply here), each to be trialled
    alone, in the rung's order: those not judged alone already (judged_alone: keys) nor kept.
    A crash of channels-last+amp says nothing of AMP alone, whose finding may rank first."""
    return [dataclasses.replace(m, alone=True) for m in rung.split
            if m.key not in judged_alone and m.name not in kept]


def with_partner(cand: Candidate, queue: list[Candidate], config: dict, done: set[str]) -> Candidate | None:
    """cand and its partner (advisor.fixes: Fix.partner) as one rung, when the model's convolutions are NCHW and
    the partner was neither tried nor kept (done: tried keys and kept names); the partner is
    taken out of the queue if it waits there, and runs alone if the pair is not kept. None:
    cand goes as it is."""
    partner = fixes.trait(cand.name, "partner", None)
    params = (config.get("parameters") or {}).get("value") or {}
    if partner is None or params.get("conv_memory_format") != "contiguous" or partner in done \
            or any(k == partner or k.startswith(partner + "(") for k in done):
        return None
    mate = next((q for q in queue if q.name == partner), None)
    if mate is not None:
        queue.remove(mate)
    else:
        mate = Candidate(partner, {}, origin=f"pairs with {cand.name}", est_gain_ms=cand.est_gain_ms)
    pair = bundle([mate, cand])
    pair.fallback, pair.fallback_when = mate, ("skipped", "failed", "rejected")
    pair.split = [cand, mate]   # failed: the fix that was picked (ranked first) alone first
    return pair


def compiles(cand: Candidate) -> bool:
    """The rung compiles the model (torch.compile), alone or with riders."""
    return any(fixes.trait(p.name, "compiles") for p in cand.parts)


def slow_start(cand: Candidate) -> bool:
    """A fix of the rung is long to start (cudnn.benchmark's search, a compile): guesses made
    one trial ahead are still starting when its turn comes, so it is guessed two ahead too."""
    return any(fixes.trait(p.name, "slow_start") for p in cand.parts)


def riders_of(cand: Candidate) -> list[Candidate]:
    """The fixes that rode with compile in this rung (none when it is not compile's)."""
    return [p for p in cand.parts if not fixes.trait(p.name, "compiles")] if compiles(cand) else []


def goes_last(cand: Candidate, queue: list[Candidate], done: set[str], apart: set[str]) -> bool:
    """Whether cand (a fix that goes last) should wait behind another fix still to try."""
    return fixes.trait(cand.name, "last") and any(
        not fixes.trait(q.name, "last") and q.name not in apart and q.key not in done and q.name not in done
        for q in queue)


def fix_for(cand: Candidate):
    """What the ladder asks of a rung's fix (advisor.fixes); a bundle answers for its members
    (it cannot apply when one of them cannot)."""
    if not cand.members:
        return fixes.get(cand.name)
    mods = [fixes.get(m.name) for m in cand.members]
    return SimpleNamespace(
        changes_numerics=any(m.changes_numerics for m in mods),
        not_applicable=lambda config, environment, params: "; ".join(filter(None, (
            m.not_applicable(config, environment, p.params) for m, p in zip(mods, cand.members)))) or None,
        describe=lambda params: "; ".join(m.describe(p.params) for m, p in zip(mods, cand.members)),
    )


def requeue(queue, child, analysis, model, ctx, tried, keep: frozenset = frozenset(),
            rules: list | None = None) -> list[Candidate]:
    """Re-run the rules (`rules`: the catalogue loaded already, else loaded here) on the new
    stack's trace: the queue becomes what they propose now, by gain. A fix whose finding no
    longer fires has nothing left to fix (pinned copies once the data lives on the GPU) and is
    dropped; --fix names stay queued, and so do the keys in `keep` (found in the trace of a fix
    that was not kept: what they fix shows only with it)."""
    if analysis is None or model is None:
        return queue
    findings = ctx.runner.findings(model, analysis, child.get("config") or {},
                                   child.get("environment") or ctx.environment, ctx, rules=rules)
    fresh = {c.key: c for c in candidates_from_findings(findings, ctx.environment, None) if c.key not in tried}
    named = [q for q in queue if (ctx.only and q.name in ctx.only or q.key in keep) and q.key not in fresh]
    kept = [c for c in fresh.values() if ctx.only is None or c.name in ctx.only]
    return sorted(kept + named, key=lambda c: -(c.est_gain_ms or 0.0))


@dataclass
class Pick:
    """What pick() chose: the next rung (None: the queue is spent) and the ladder's state after
    the choice. The ladder records `skipped` and says `notes`; a guess drops them."""
    rung: Candidate | None
    queue: list[Candidate]
    tried: set[str]
    apart: list[Candidate] = field(default_factory=list)             # measured apart, after the ladder
    skipped: list[tuple[Candidate, str]] = field(default_factory=list)  # cannot apply: why
    notes: list[str] = field(default_factory=list)


def pick(queue: list[Candidate], tried: set[str], kept: set[str], *, config: dict, environment: dict,
         only: set[str] | None = None, retried: frozenset = frozenset(), slow: frozenset = frozenset(),
         apart: frozenset = frozenset(), floor_ms: float = 0.0, riders: tuple = ()) -> Pick:
    """The next rung to trial from the queue, as a pure function of the ladder's state (the
    ladder's next step, and a guess at it for a process started ahead: advisor.trials.lookahead).
    kept: names of fixes kept (and --apply's); retried: keys tried again after the bottleneck
    moved, whose partner rejected as slow (in `slow`) may come back; apart: names measured
    apart (batch size; a fix that would override the user's reproducibility choice); config:
    the kept stack's observed configuration; floor_ms: the least gain a trial can be accepted
    on now (the threshold times the reference's step); riders: fixes rejected on a host-bound
    step, trialled with torch-compile (Fix.rides_with_compile)."""
    out = Pick(None, list(queue), set(tried))
    while out.queue:
        cand = out.queue.pop(0)
        done = out.tried | kept
        # A fix already kept is not stacked again, whatever its parameters: its group competed
        # already (compile default on top of reduce-overhead compiled twice).
        if cand.key in out.tried or cand.name in kept:
            continue
        if early.under_its_bound(cand, floor_ms) and not (only and cand.name in only):
            # It cannot be accepted now: not tried (the rules propose it again on the next kept
            # stack, with what it may give there: deferred syncs once the host waits in them).
            out.skipped.append((cand, f"gives {cand.est_gain_ms:.2f} ms a step at most, under the "
                                      f"{floor_ms:.2f} ms a trial could be accepted on now; asked again on the next kept stack"))
            continue
        if goes_last(cand, out.queue, done, apart):
            out.queue.append(cand)
            continue
        out.tried.add(cand.key)
        if cand.name in apart:
            out.apart.append(cand)
            continue
        rung = cand if cand.alone else _joined(cand, out, kept, config, environment, only=only, retried=retried,
                                                slow=slow, apart=apart, riders=riders, done=done)
        if rung is None:
            continue
        why = fix_for(rung).not_applicable(config, environment, rung.params)
        if not why:
            out.rung = rung
            return out
        if rung.split:   # each fix that can apply is trialled alone; the others say why not
            alone = split(rung, set(), kept)
            out.skipped += [(m, w) for m in alone if (w := fix_for(m).not_applicable(config, environment, m.params))]
            fit = [m for m in alone if not fix_for(m).not_applicable(config, environment, m.params)]
            if fit:
                out.notes.append(f"{rung.key} cannot apply here: trying {', '.join(m.key for m in fit)} alone")
            for m in reversed(fit):
                out.tried.discard(m.key)
                out.queue.insert(0, m)
            continue
        out.skipped.append((rung, why))
        if rung.fallback and "skipped" in rung.fallback_when:
            out.notes.append(f"{rung.key} skipped: trying {rung.fallback.key} instead")
            out.queue.insert(0, rung.fallback)
    return out


def _joined(cand: Candidate, out: Pick, kept: set[str], config: dict, environment: dict, *, only, retried,
            slow, apart, riders, done) -> Candidate | None:
    """cand's rung: with the fixes that ride with compile, its partner, or the small safe fixes
    queued beside it (None: no member of the bundle can apply)."""
    riding = [r for r in riders if r.name not in kept and (not only or r.name in only)]
    if fixes.trait(cand.name, "compiles") and riding:
        cand = with_riders(cand, riding, out)
    # A retry may bring back a partner that was rejected beside it for the same reason
    # (both as slow on a host-bound step): only a kept one stays out.
    pair = with_partner(cand, out.queue, config, done - (slow if cand.key in retried else set()))
    if pair is not None and only and not all(m.name in only for m in pair.members):
        pair = None  # under --fix, a pair only when both fixes are named
    if pair is not None:
        pair.note = f"{cand.key} pays on NCHW convolutions with {pair.members[0].key}: trialled together"
        out.notes.append(pair.note)
        return pair
    return _bundled(cand, out, kept | apart, config, environment, only)


def _bundled(cand: Candidate, out: Pick, kept: set[str], config: dict, environment: dict,
             only: set[str] | None) -> Candidate | None:
    """cand, or one rung with every small safe fix queued beside it (Fix.bundled); members that
    cannot apply to the script are recorded as skipped and left out. Under --fix each named fix
    is measured on its own."""
    if only:
        return cand
    members, out.queue = take_bundle(cand, out.queue, out.tried | kept)
    if len(members) == 1:
        return cand
    applicable = []
    for m in members:
        out.tried.add(m.key)
        why = fixes.get(m.name).not_applicable(config, environment, m.params)
        if why:
            out.skipped.append((m, why))
        else:
            applicable.append(m)
    if not applicable:
        return None
    rung = bundle(applicable)
    if rung.members:
        rung.note = f"{rung.key}: small safe fixes, trialled together (each alone is likely inside the noise)"
        out.notes.append(rung.note)
    return rung
