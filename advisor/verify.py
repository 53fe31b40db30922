"""Does fixes.patch do, as plain python, what the trials measured?

After the ladder, the patch is applied to scratch copies of the files it edits (never the
user's files) and the patched script runs in a fresh process under the same step detection
and timing, with no fix applied at run time. Its samples/s against the baseline and against
the in-run stack is ``patch.verification`` in run.json; each kept fix is then checked in what
that run observed (the weights' memory format, autocast, compiled graphs, the DataLoader's
arguments, ...), so a patch that falls short names the edit that did not take, at file:line.

The patched run starts where the user's own run does: their working directory, the script at
its own path, so relative paths and ``__file__`` resolve as they will after ``git apply``. The
patched copies are read in place of the user's files by path (spec ``sources``: the script's
text and every patched module it imports, runner/sandbox.py), and its writes are redirected as
a trial's are.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import statistics
import subprocess
from collections.abc import Callable
from pathlib import Path

from advisor import (
    failures,
    fixes as registry,  # the parameter `fixes` below is the kept ones
    measure,
    specs,
)
from advisor.contracts import PatchNote, Verification, VerificationCheck
from advisor.fixes.base import NOT_CHECKED, FixSpec

NAME = "verify-plain-python"
SHORT = 0.90          # under this fraction of the stack, the report names what did not take
# A run-to-run band wider than this says the runs cannot tell the patch from a much slower one:
# a shortfall is judged against this much at most.
BAND_CAP = 0.30


# ----------------------------------------------------------------------------- the overlay

def patched_files(diff: str) -> list[str]:
    """The relative paths a unified diff writes (its ``+++ b/...`` lines)."""
    return [m.group(1).strip() for m in re.finditer(r"^\+\+\+ b/(.+)$", diff, re.M)]


def apply_patch(diff: str, tree: str, texts: dict[str, str]) -> str | None:
    """Apply ``diff`` in ``tree`` as a user would (``git apply``, else ``patch -p1``); where
    neither tool is there, the patched texts are written. Returns an error, or None."""
    # GIT_CEILING_DIRECTORIES: the run directory may sit inside the user's repository, and
    # git apply run there would take the patch's paths from that repository's root
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": os.path.dirname(os.path.abspath(tree))}
    for cmd in (["git", "apply", "-"], ["patch", "-p1", "-s", "--no-backup-if-mismatch"]):
        if shutil.which(cmd[0]) is None:
            continue
        proc = subprocess.run(cmd, input=diff, text=True, cwd=tree, capture_output=True, env=env)
        if proc.returncode != 0:
            last = (proc.stderr or proc.stdout).strip().splitlines()[-1:]
            return f"{' '.join(cmd[:2])} failed: {last[0] if last else proc.returncode}"
        wrong = [rel for rel, text in texts.items() if Path(tree, rel).read_text() != text]
        return f"{' '.join(cmd[:2])} wrote other text than the patch's into {', '.join(wrong)}" if wrong else None
    for rel, text in texts.items():
        Path(tree, rel).write_text(text)
    return None


def argv_with_changes(argv: list[str], notes: list[PatchNote]) -> list[str]:
    """The script's arguments with the patch's flag changes (a value the user passes on the
    command line is changed there, not in the code: ``--workers 4`` → ``--workers 8``)."""
    from advisor.patch.options import apply_argv_changes

    return apply_argv_changes(argv, [ch for n in notes for ch in n.get("argv_changes") or []])


def environ_changes(notes: list[PatchNote]) -> dict[str, str]:
    """{NAME: value}: the environment variables the patch's values come from, as they must be set
    (a worker count read from ``os.environ["WORKERS"]``, which the user's environment sets)."""
    return {ch["name"]: str(ch["to"]) for n in notes for ch in n.get("env_changes") or []}


def recommended_command(argv0: str, script_args: list[str], notes: list[PatchNote]) -> list[str]:
    """patch.command: the exact command the user runs with fixes.patch applied: ``python`` and the
    script as they typed it, their arguments with the patch's flag changes; under the ddp fix, its
    torchrun launch with those arguments; the environment variables it changes before it, as a
    shell line sets them (``WORKERS=8 python main.py``). Equal to the user's own command when no
    flag or variable changes."""
    args = argv_with_changes(script_args, notes)
    env = [f"{k}={v}" for k, v in environ_changes(notes).items()]
    launch = next((n["launch"] for n in notes if n.get("applied") and n.get("launch")), None)
    if launch:   # "torchrun --nproc-per-node N <script> <the user's arguments>": its prefix, our arguments
        tokens = shlex.split(launch)
        return [*env, *tokens[:len(tokens) - len(script_args)], *args]
    return [*env, "python", argv0, *args]


def command_line(command: list[str]) -> str:
    """One copyable line."""
    return shlex.join(command)


def patch_header(command: list[str], root: str | None = None, where: str | None = None) -> str:
    """fixes.patch's first lines, before the diff (git apply and patch skip them): the directory
    its paths are relative to (``root``), and the command, run from where advisor ran (``where``)."""
    at = f"Apply from {root} with `git apply fixes.patch`" if root else "Apply with `git apply fixes.patch`"
    run = f", then run from {where}:" if where and where != root else ", then run:"
    return ("advisor: the fixes `advisor analyze` kept (run.json patch; its run as plain python: patch.verification).\n"
            f"{at}{run}\n    {command_line(command)}\n\n")


def patch_root(script: str, cwd: str | None = None) -> str:
    """The directory fixes.patch's paths are relative to, where the user applies it: the root of
    the git repository holding the script; else the directory advisor was run from, when the
    script lies under it; else the script's own directory."""
    script = os.path.realpath(script)
    here = os.path.realpath(cwd or os.getcwd())
    d = os.path.dirname(script)
    while True:
        if os.path.exists(os.path.join(d, ".git")):
            return d
        up = os.path.dirname(d)
        if up == d:
            break
        d = up
    return here if script.startswith(here.rstrip(os.sep) + os.sep) else os.path.dirname(script)


def scratch_copies(root: str, tree: Path, rels: list[str]) -> dict[str, str]:
    """Each file the patch edits (paths relative to ``root``) copied into ``tree`` at the same
    relative path, where the patch is applied; {the user's path: its copy}."""
    out = {}
    shutil.rmtree(tree, ignore_errors=True)
    for rel in rels:
        src, dst = Path(root, rel), tree / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_file():
            shutil.copy2(src, dst)
        out[str(src)] = str(dst)
    return out


# ----------------------------------------------------------------------------- checks

def _check(fix: dict, config: dict, base: dict) -> tuple[bool | None, str, str]:
    """(took effect?, expected, observed) for one kept fix, from the verification run's config
    (its Fix.check); None where the run cannot show it."""
    name = fix.get("intervention")
    if not registry.known(name):
        return NOT_CHECKED
    return registry.get(name).check(config, fix.get("params") or {}, base)


def as_written(base: dict, applied: list[dict]) -> dict:
    """The baseline's record with the batch the script itself sets: fixes --apply ran in it at
    run time that multiply the batch (batch-size, activation-checkpointing) made its batch theirs,
    and a check of such a fix's edit counts from the script's own."""
    factor = 1
    for a in applied:
        if registry.known(a.get("name")):
            factor *= registry.get(a["name"]).batch_factor(a.get("params") or {})
    if factor > 1 and base.get("batch_size"):
        return {**base, "batch_size": base["batch_size"] // factor}
    return base


def checks(fixes: list[dict], notes: list[PatchNote], config: dict, base: dict) -> list[VerificationCheck]:
    """One row per fix: did its edit take effect in the patched run, and where is it. ``base``:
    the baseline as the script runs it (as_written)."""
    where = {n.get("intervention"): n for n in notes}
    rows: list[VerificationCheck] = []
    for fix in fixes:
        note = where.get(fix.get("intervention")) or {}
        ok, want, got = _check(fix, config, base)
        if not note.get("applied"):
            ok = False if ok is not True else ok
        elif note.get("superseded_by") and ok is False:  # workers that a preloaded dataset no longer needs
            ok, got = None, f"{got} (superseded by {note['superseded_by']})"
        rows.append({"fix": fix.get("intervention"), "took_effect": ok, "expected": want, "observed": got,
                     "where": note.get("where"), "placed": bool(note.get("applied")),
                     "reason": None if note.get("applied") else note.get("reason")})
    return rows


# ----------------------------------------------------------------------------- the run

def verify(script: str, script_args: list[str], run_dir: Path, opts, diff: str, texts: dict[str, str],
           notes: list[PatchNote], fixes: list[dict], baseline: dict, stack_samples_per_s: float | None,
           *, timeout: float, stdout_to_stderr: bool = False, progress=None,
           noise_band: float | None = None, gpu: str | None = None, signals=None,
           retime_stack: Callable[[], float | None] | None = None,
           fits: Callable[[float], bool] | None = None, applied: list[dict] = (),
           root: str | None = None) -> Verification:
    """Apply ``diff`` to scratch copies of the files it edits, run the patched script as plain
    python (timed, no fix at run time) and compare; returns ``patch.verification``.
    ``noise_band``: the trials' threshold for one run against one (status_of). ``gpu``: the one
    GPU its runs see (beside the trials' last processes on the others); ``signals``: what stops
    them from another thread (run_child's). ``retime_stack``: a stack timed once, timed again
    when the patched runs fall short of it (_stack_again). ``fits(seconds)``: whether a run that
    long still ends inside --budget; a second run (of the patch, or of the stack) that would not
    is left out, and the verdict rests on the one run and the noise band (``timed_once``).
    ``applied``: the fixes --apply ran in the baseline (as_written). ``root``: the directory the
    diff's paths are relative to (patch_root)."""
    from advisor.runner.parent import run_child

    command = recommended_command(script, script_args, notes)
    root = root or patch_root(script)
    tree = Path(run_dir) / "verify" / "tree"
    sources = scratch_copies(root, tree, sorted(set(patched_files(diff))))
    error = apply_patch(diff, str(tree), texts) if diff else None   # a flag change alone: nothing to apply
    # the command the user is told to run (patch.command), run here with the patched files read
    out: Verification = {"tree": os.path.relpath(tree, run_dir), "argv": argv_with_changes(script_args, notes),
                         "command": command, "runs": 0}
    if environ := environ_changes(notes):
        out["environ"] = environ
    if error:
        return {**out, "status": "not applied", "error": error}
    runs: list[dict] = []
    kept = [FixSpec.of(f) for f in fixes]
    batch_changes = any(registry.trait(f.name, "changes_batch") for f in kept)
    for attempt in range(2):
        spec = _patched_spec(script, out["argv"], Path(run_dir), attempt + 1, opts, sources, environ, gpu, kept)
        if progress:
            progress("verifying fixes.patch as plain python" + (" (again)" if attempt else ""))
        child = run_child(spec, timeout=timeout, step_timeout=opts.step_timeout, stdout_to_stderr=stdout_to_stderr,
                          stall_timeout=opts.stall_timeout, signals=signals)
        if not measure.step_times(child):
            out.update(status="failed", error=pipeline_reason(child), runs=len(runs) + 1,
                       failure=failures.of_trial([child], pipeline_reason(child)))
            break
        runs.append(child)
        rate = _rate(runs, baseline, batch_changes)
        if not stack_samples_per_s or rate / stack_samples_per_s >= SHORT:
            break
        if not _another_fits(child, fits, out):
            break
    stack_spread = None
    if runs:
        rate = _rate(runs, baseline, batch_changes)
        if stack_samples_per_s and retime_stack is not None and rate / stack_samples_per_s < SHORT \
                and _another_fits(runs[-1], fits, out):
            stack_samples_per_s, stack_spread = _stack_again(stack_samples_per_s, retime_stack, out)
        base_rate = measure.samples_per_s(baseline)
        frac = rate / stack_samples_per_s if stack_samples_per_s else None
        if gpu is not None:
            out["gpu"] = gpu
        toks = [t for t in map(measure.tokens_per_s, runs) if t]
        if toks:   # a sequence model's real tokens a second, as the baseline's and the trials' are read
            out["tokens_per_s"] = statistics.fmean(toks)
        out.update(runs=len(runs), samples_per_s=rate, step_time_ms=measure.mean_step_ms(runs),
                   speedup_vs_baseline=rate / base_rate if base_rate else None, of_stack=frac,
                   stack_samples_per_s=stack_samples_per_s)
        out["checks"] = checks(fixes, notes, runs[-1].get("config") or {}, as_written(baseline, applied))
        # the patched runs' own spread counts too: at a regime the trials timed once (a step many
        # times faster than the baseline the noise was measured on) their threshold says little
        own = measure.pooled_noise([runs]) if len(runs) > 1 else None
        noise_band = max(noise_band or 0.0, 2.0 * own) if own is not None else noise_band
        if stack_spread is not None:   # the stack's two runs spread too
            noise_band = max(noise_band or 0.0, 2.0 * stack_spread)
        out["status"] = status_of(frac, out["checks"], noise_band)
        if out["status"] == "verified" and frac is not None and frac < SHORT:
            out["within_noise"] = min(noise_band, BAND_CAP)   # under 90%, inside the band: not told apart
        losses = [x for x in runs[-1].get("losses") or [] if isinstance(x, (int, float))]
        out["loss_finite"] = bool(losses) and all(x == x and abs(x) != float("inf") for x in losses)
    return out


def _patched_spec(script: str, argv: list[str], run_dir: Path, n: int, opts, sources: dict[str, str],
                  environ: dict, gpu: str | None, kept: list[FixSpec]) -> dict:
    """The spec of the patched script's n-th plain-python run, in verify/run-N (not a trial's):
    the user's script at its own path, in their working directory, its patched files read from
    their copies (``sources``)."""
    spec = specs.trial_spec(script, argv, run_dir, opts, NAME, [], profile=False)
    spec["run_dir"] = str(run_dir / "verify" / f"run-{n}")
    spec["sources"] = sources
    spec["environ"] = {**spec.get("environ", {}), **environ}   # and the variables patch.command sets
    if gpu is not None:
        spec["environ"]["CUDA_VISIBLE_DEVICES"] = gpu
    # the patched script of a ddp fix runs as torchrun runs it (the report gives the command)
    spec["nproc_per_node"] = specs.launch_nproc([f.as_spec() for f in kept], opts.nproc_per_node)
    return spec


def _another_fits(child: dict, fits: Callable[[float], bool] | None, out: dict) -> bool:
    """Whether one more run as long as ``child`` ends inside the budget; when not, out says so."""
    took = child.get("elapsed_s")
    if fits is None or not isinstance(took, (int, float)) or fits(float(took)):
        return True
    out["timed_once"] = f"a second run ({took:.0f} s) would end past --budget"
    return False


def _stack_again(rate: float, retime_stack: Callable[[], float | None], out: dict) -> tuple[float, float | None]:
    """The stack's rate as the mean of its run and one more (retime_stack), and their spread
    (None when the second run measured nothing: the one run stands)."""
    again = retime_stack()
    if not again:
        return rate, None
    out["stack_runs"] = 2
    return (rate + again) / 2, max(again, rate) / min(again, rate) - 1.0


def status_of(of_stack: float | None, rows: list[VerificationCheck], noise_band: float | None = None) -> str:
    """"verified": every edit took effect (or the run cannot show it) and the patched run reaches
    SHORT of the stack, or falls short of it by less than the run-to-run noise band (the trials'
    threshold for one run against one: on a host whose runs spread 30%, one run at 85% of another
    tells them apart from nothing; a band wider than BAND_CAP counts as BAND_CAP); "partial": an
    edit did not take effect, whatever the rate (the other fixes alone may reach the stack: the
    user still does not get what was measured);
    "short": every edit took, the rate falls under both."""
    if any(r.get("took_effect") is False for r in rows):
        return "partial"
    if of_stack is None or of_stack >= SHORT:
        return "verified"
    return "verified" if noise_band and of_stack >= 1.0 - min(noise_band, BAND_CAP) else "short"


def _rate(runs: list[dict], baseline: dict, batch_changes: bool) -> float:
    """samples/s over the runs, at the baseline's batch unless a fix of the patch changes it
    (measure.hold_batch: a model compiled from its first call hides its batch from the hooks)."""
    ms = measure.mean_step_ms(runs)
    first = dict(runs[0])
    measure.hold_batch(first, baseline, batch_changes)
    return measure.samples_per_s(first, ms) or 0.0


def pipeline_reason(child: dict) -> str:
    from advisor.runner.parent import format_reasons

    try:
        return format_reasons(child) or "the patched script measured no step"
    except Exception:  # noqa: BLE001 - a reason, not a crash
        return "the patched script measured no step"
