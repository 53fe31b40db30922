"""Trials on several GPUs: a single-GPU script's trial processes run side by side, each pinned
to a GPU of its own (CUDA_VISIBLE_DEVICES), instead of one after another on the first.

The ladder stays what it is (greedy, each rung judged on the stack before it); what changes is
when its processes run. While the ladder waits for one, the processes it is likely to ask for
next (its guesses: advisor.trials.guesses) already run to the end on the other GPUs; when the
ladder asks for one of them it takes that run's result, waiting only for what is left of it. A
guess the ladder no longer expects is stopped, and its GPU goes to a newer guess.

GPUs of one kind still differ a little (clocks, cooling, the host's NUMA node): while the repeat
runs on the first GPU, the baseline runs once on each other GPU too. A GPU whose step time is
off the first's by more than twice the run-to-run noise has its runs' step times scaled by that
offset before a verdict reads them; a smaller offset cannot be told from noise and is left
alone (scaling by a one-run estimate would add its own noise). trial_summary.gpus gives each
GPU's offset, and each trial record its ``gpu``.

Only for a script that trains on one GPU: the baseline ran on CUDA, under one process, with no
DataParallel model (that spreads itself over every visible GPU). A fix whose run launches
several processes (ddp) runs alone, with every GPU visible, once the others are done.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

from advisor import measure
from advisor.runner.follow import Signals
from advisor.trials.gpu_jobs import Job
from advisor.trials.process import Slot
from advisor.trials.windows import Windows

IDLE_MIB = 1024          # a GPU with less memory in use than this runs nothing else
# A step that waits for its batch this much of the time is set by the loader, not the GPU: a
# GPU's offset would not show in it, and three more copies of the loader beside the repeat
# load the host the repeat's noise is measured on.
LOADER_SET = 0.25
REFERENCE = "00-baseline-gpu"   # the baseline once on each other GPU: its offset from the first


def visible(smi: str | None = None) -> list[dict]:
    """The GPUs this process sees, in CUDA's order: [{"id": what CUDA_VISIBLE_DEVICES names it
    by, "used_mib"}]. ``smi``: nvidia-smi's CSV (index, uuid, memory.used) for tests."""
    if smi is None:
        if not shutil.which("nvidia-smi"):
            return []
        try:
            smi = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid,memory.used", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=20).stdout
        except (OSError, subprocess.SubprocessError):
            return []
    rows = []
    for line in smi.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3 and parts[0].isdigit():
            rows.append({"index": parts[0], "uuid": parts[1], "used_mib": float(parts[2] or 0)})
    seen = os.environ.get("CUDA_VISIBLE_DEVICES")
    if seen is None:
        return [{"id": r["index"], "used_mib": r["used_mib"]} for r in rows]
    out = []
    for name in (n.strip() for n in seen.split(",") if n.strip()):
        row = next((r for r in rows if name in (r["index"], r["uuid"]) or r["uuid"].startswith(name)), None)
        if row is None:   # CUDA stops at the first name it cannot find
            break
        out.append({"id": name, "used_mib": row["used_mib"]})
    return out


def choose(gpus: list[dict], asked: str | None = None, count: int | None = None) -> list[str]:
    """The GPUs the trials use, the baseline's (the first visible) first: ``asked`` (--gpus, a
    comma-separated list of positions among the visible GPUs), else the idle ones, at most
    ``count`` (--trial-gpus). Raises ValueError for a position that is not visible."""
    if asked:
        picked = []
        for word in (w.strip() for w in asked.split(",") if w.strip()):
            if not word.isdigit() or int(word) >= len(gpus):
                raise ValueError(f"--gpus: no visible GPU {word} (this machine shows {len(gpus)})")
            picked.append(gpus[int(word)]["id"])
    else:
        picked = [g["id"] for i, g in enumerate(gpus) if i == 0 or g["used_mib"] < IDLE_MIB]
    picked = list(dict.fromkeys(picked))
    return picked[:count] if count else picked


def why_one(baseline: dict, nproc: int) -> str | None:
    """Why the trials run on one GPU whatever the machine has; None when they may spread."""
    if nproc > 1:
        return "the script runs several processes (--nproc-per-node)"
    if not (baseline.get("environment") or {}).get("gpu_name") and not (baseline.get("memory") or {}).get("capacity_bytes"):
        return "the baseline did not train on a GPU"
    model = ((baseline.get("config") or {}).get("model") or {}).get("value") or {}
    if model.get("wrapper") in ("DataParallel",):
        return "the model is DataParallel: each run spreads over every visible GPU"
    return None


def plan(baseline: dict, nproc: int, asked: str | None = None, count: int | None = None) -> dict:
    """{"gpus": the GPUs the trials run on, "why_one": why only the first} for this run; one GPU
    (the first visible) wherever the script's own way of running forbids spreading."""
    why = why_one(baseline, nproc)
    shown = visible() if why is None else []
    picked = choose(shown, asked, count) if shown else []
    if why is None and len(picked) < 2:
        why = "this machine shows one GPU" if len(shown) < 2 else "the other GPUs are busy or were not asked for"
    return {"gpus": picked if why is None else picked[:1], "why_one": why}


class _NoAhead:
    """A process on a GPU of its own starts no guesses (the others run on the other GPUs); it
    starts from a spare, python and torch up already (lookahead.Lookahead.spare), where
    ``ahead`` has one, and tells its stages to ``on_stage`` (trials.windows)."""

    def __init__(self, ahead=None, on_stage=None):
        self.ahead, self._on_stage = ahead, on_stage

    def take(self, spec):
        return None, (self.ahead.spare() if self.ahead is not None else None)

    def guess(self, running, specs):
        pass

    def on_stage(self, *a, **k):
        if self._on_stage is not None:
            self._on_stage(*a, **k)

    def resume(self):
        pass

    def note(self, child):
        pass


class _Told:
    """The ladder's processes started ahead (lookahead.Lookahead) for the process run in its
    thread, its stages told to the timed windows too (trials.windows)."""

    def __init__(self, ahead, on_stage):
        self._ahead, self._on_stage = ahead, on_stage

    def __getattr__(self, name):
        return getattr(self._ahead, name)

    def on_stage(self, *a, **k):
        self._ahead.on_stage(*a, **k)
        self._on_stage(*a, **k)


class ParallelRunner:
    """A TrialRunner (advisor.trials.process) over several GPUs: ``inner`` runs each process,
    in a thread of its own, with ``ctx.slot`` naming its GPU (a copy of the ladder's context)."""

    def __init__(self, inner, gpus: list[str]):
        self.inner, self.gpus = inner, list(gpus)
        self.jobs: dict[tuple, Job] = {}
        self.lock = threading.Lock()
        self.offsets: dict[str, dict] = {}
        self.calibration: dict[str, Job] = {}
        self.log: list[dict] = []
        self.guessed: set[tuple] = set()
        self.t0 = time.monotonic()
        self.guess_log: list[dict] = []   # each guess started: where, when, and when given up
        self.held_out: set[str] = set()   # claimed for a run beside the ladder's (claim)
        self.first_done = False
        self.inline: str | None = None    # the GPU of the process run in the ladder's thread (_first)
        self.windows = Windows()          # one timed window at a time

    # the TrialRunner interface: findings and the ceiling are the inner runner's
    def findings(self, *a, **k):
        return self.inner.findings(*a, **k)

    def ceiling(self, after, name: str | None = None):
        return self.inner.ceiling(after, name=name)

    def process(self, ctx, name: str, stack: list, profile: bool = True, guesses=None):
        """One process of the ladder: a guess's run when one was made on it, else a new run on
        a free GPU; the next guesses start on the GPUs left while it runs."""
        key = _key(name, stack, profile)
        if _several_processes(stack):   # ddp: every GPU, nothing beside it
            self._drop(keep=set())
            return self.inner.process(dataclasses.replace(ctx, slot=None, ahead=_NoAhead()), name, stack, profile, None)
        if not self.first_done:
            return self._first(ctx, key, name, stack, profile, guesses)
        for other in [j for j in self.jobs.values() if j.name == name and j.key != key]:
            self._stop(other)   # a guess of this name on another stack: the wrong branch
        job = self.jobs.get(key) or self._start(ctx, key, name, stack, profile, guess=False)
        job.guess = False
        if guesses is not None:   # None: a timing-only re-run between; the guesses running go on
            self._guess(ctx, key, guesses)
        while job.thread.is_alive():   # Ctrl-C stops every process at once, this one included
            job.thread.join(0.2)
            if ctx.interrupted is not None and ctx.interrupted():
                for j in [*self.jobs.values(), *self.calibration.values()]:
                    self.windows.forget(j.cancel)
                    j.cancel.count += 1
        with self.lock:
            self.jobs.pop(key, None)
        job.take_name()
        child, analysis, model = job.result
        self._taken(name, job.gpu, key in self.guessed, job.began, job.ended)
        return self._adjust(child, job.gpu), analysis, model

    def _taken(self, name: str, gpu: str, guessed: bool, began: float, ended: float) -> None:
        """A process the ladder took, and when it ran, in seconds from the trials' start: what
        ran beside what."""
        self.log.append({"process": name, "gpu": gpu, "started_on_a_guess": guessed,
                         "from_s": round(began - self.t0, 1), "to_s": round(ended - self.t0, 1)})

    def _first(self, ctx, key: tuple, name: str, stack: list, profile: bool, guesses):
        """The ladder's first process (the repeat) on the first GPU, the baseline once on each
        other GPU beside it (unless the loader sets the step: LOADER_SET). The repeat runs as
        the baseline did, every GPU visible (cuda:0 is the first), so the process started with
        the baseline and held at its first CUDA use is released for it (trials.lookahead): its
        start-up is behind it already."""
        self.first_done = True
        share = measure.data_wait_share(ctx.baseline)
        if share is not None and share >= LOADER_SET:
            for gpu in self.gpus[1:]:
                self.offsets[gpu] = {"offset": 1.0, "applied": False,
                                     "why": f"not measured: the loader sets the step ({share:.0%} of it waiting for "
                                            "data), and copies of it beside the repeat would load the host"}
        else:
            self._calibrate(ctx)
        self.inline = self.gpus[0]   # busy: the repeat runs in this thread, not as a job
        if guesses:   # on the GPUs no calibration holds
            self._guess(ctx, key, guesses)
        began = time.monotonic()
        signals = Signals()   # every GPU visible (slot None), its windows and stops told to the others (trials.windows)
        inline = dataclasses.replace(ctx, slot=Slot(None, signals), ahead=_Told(ctx.ahead, self.windows.watch(signals)))
        try:
            child, analysis, model = self.inner.process(inline, name, stack, profile, None)
        finally:
            self.inline = None
            self.windows.forget(signals)
        self._taken(name, self.gpus[0], bool(child.get("started_held")), began, time.monotonic())
        if child.get("interrupted"):
            for job in self.calibration.values():
                self.windows.forget(job.cancel)
                job.cancel.count += 1
        self._settle_offsets(ctx.baseline, child if child.get("status") == "complete" else None)
        return self._adjust(child, self.gpus[0]), analysis, model

    def keep_guesses(self, names: set[str]) -> None:
        """Stop the guesses running for processes not among ``names`` (the ladder's rungs, once
        it is done: only what is measured on top of its stack is still to come)."""
        self._drop(keep={k for k, j in self.jobs.items() if j.name in names or not j.guess})

    def claim(self) -> str | None:
        """A GPU for a run of advisor's own beside the ladder's processes (the patch's
        verification, advisor.pipeline): the first no process holds, kept from the ladder until
        release(); None when every GPU is busy, or one would be left for the ladder."""
        free = [g for g in self.gpus if g not in self._busy() and g not in self.held_out]
        if not free or len(self.gpus) - len(self.held_out) < 2:
            return None
        self.held_out.add(free[0])
        return free[0]

    def release(self, gpu: str) -> None:
        self.held_out.discard(gpu)

    def close(self) -> None:
        """Stop whatever still runs on a guess (the ladder is done, or Ctrl-C)."""
        for job in [*self.jobs.values(), *self.calibration.values()]:
            self._stop(job)
        self.calibration = {}

    def summary(self) -> dict:
        return {"gpus": [{"gpu": g, **self.offsets.get(g, {"offset": 1.0, "applied": False})} for g in self.gpus],
                "processes": self.log, "guesses": self.guess_log, "stopped_for_windows": self.windows.stops}

    # ------------------------------------------------------------------ scheduling
    def _start(self, ctx, key: tuple, name: str, stack: list, profile: bool, guess: bool,
               alias: str | None = None) -> Job | None:
        gpu = self._free_gpu(preempt=not guess)
        if gpu is None:
            return None
        job = Job(key, gpu, guess, run_dir=Path(ctx.run_dir), alias=alias)
        with self.lock:
            self.jobs[key] = job
        if guess:
            self.guessed.add(key)
            job.logged = {"process": job.where, "gpu": gpu, "from_s": round(time.monotonic() - self.t0, 1)}
            self.guess_log.append(job.logged)
        self._launch(ctx, job, stack, profile)
        return job

    def _launch(self, ctx, job: Job, stack: list, profile: bool) -> None:
        """Run the job's process in a thread of its own, on its GPU (a copy of the context)."""

        def run() -> None:
            sub = dataclasses.replace(ctx, slot=Slot(job.gpu, job.cancel),
                                      ahead=_NoAhead(ctx.ahead, self.windows.watch(job.cancel)))
            job.began = time.monotonic()
            try:
                job.result = self.inner.process(sub, job.where, stack, profile, None)
            except BaseException as e:  # noqa: BLE001 - a process that raised is a failed run
                job.result = ({"status": "incomplete", "incomplete_reasons": [f"{type(e).__name__}: {e}"]}, None, None)
            finally:
                self.windows.forget(job.cancel)
            job.ended = time.monotonic()

        job.thread = threading.Thread(target=run, daemon=True, name=f"{job.name} on GPU {job.gpu}")
        job.thread.start()

    def _busy(self) -> set[str]:
        with self.lock:
            jobs = [*self.jobs.values(), *self.calibration.values()]
        return {j.gpu for j in jobs if j.result is None} | ({self.inline} if self.inline else set())

    def _free_gpu(self, preempt: bool) -> str | None:
        """A GPU no running process holds; for the process the ladder waits on, a guess's GPU
        when none is free (that guess is stopped)."""
        ours = [g for g in self.gpus if g not in self.held_out]
        free = [g for g in ours if g not in self._busy()]
        if free:
            return free[0]
        if not preempt:
            return None
        victim = next((j for j in reversed(list(self.jobs.values())) if j.guess and j.result is None), None)
        if victim is None:
            return ours[0]
        self._stop(victim)
        return victim.gpu

    def _guess(self, ctx, running: tuple, guesses: list) -> None:
        """Start the guesses on the GPUs left, most likely first; stop the guesses running that
        are no longer expected."""
        wanted = [(_key(n, s, p), n, s, p) for n, s, p in guesses if not _several_processes(s)]
        self._drop(keep={running, *(k for k, *_ in wanted)})
        for key, n, s, p in wanted:
            if key in self.jobs:
                continue
            # one process a directory: a second of this name (the same rung on the other
            # branch's stack) runs under an alias, and moves to its name if taken
            taken = {j.where for j in self.jobs.values()}
            alias = next(f"{n}~{i}" for i in range(1, 99) if f"{n}~{i}" not in taken) if n in taken else None
            if self._start(ctx, key, n, s, p, guess=True, alias=alias) is None:
                break

    def _drop(self, keep: set) -> None:
        for job in [j for j in self.jobs.values() if j.guess and j.key not in keep]:
            self._stop(job)

    def _stop(self, job: Job) -> None:
        """Stop a run the ladder will not take (as Ctrl-C would), and discard it."""
        self.windows.forget(job.cancel)   # continued, if stopped for another's window
        job.cancel.count += 1
        if job.thread is not None:
            job.thread.join()
        if job.guess and job.logged is not None:   # a guess the ladder did not take: when it was given up
            job.logged["stopped_s"] = round(time.monotonic() - self.t0, 1)
        with self.lock:
            self.jobs.pop(job.key, None)
        job.discard()

    # ------------------------------------------------------------------ GPU offsets
    def _calibrate(self, ctx) -> None:
        """The baseline once on each other GPU, beside the repeat on the first."""
        for gpu in self.gpus[1:]:
            job = Job(_key(f"{REFERENCE}{gpu}", [], False), gpu, False, run_dir=Path(ctx.run_dir))
            self.calibration[gpu] = job
            self._launch(ctx, job, [], False)

    def _settle_offsets(self, baseline: dict, first: dict | None) -> None:
        """Each GPU's offset: its baseline run's step time over the first GPU's (the baseline's
        and the repeat's mean), applied beyond twice their difference (the run-to-run noise)."""
        ms = [x for x in (measure.step_ms(baseline), measure.step_ms(first) if first else None) if x]
        if not ms:
            return
        mean = sum(ms) / len(ms)
        noise = max(ms) / min(ms) - 1.0 if len(ms) > 1 else 0.0
        for gpu, job in self.calibration.items():
            job.thread.join()
            job.discard()   # a measurement of the GPU, not a trial
            theirs = measure.step_ms(job.result[0]) if job.result else None
            if not theirs:
                self.offsets[gpu] = {"offset": 1.0, "applied": False, "why": "its baseline run measured no step"}
                continue
            offset = theirs / mean
            self.offsets[gpu] = {"offset": round(offset, 4), "applied": abs(offset - 1.0) > 2 * noise,
                                 "noise": round(noise, 4)}
        self.calibration = {}

    def _adjust(self, child: dict, gpu: str | None) -> dict:
        """The run's GPU, and its step times in the first GPU's terms where its offset counts."""
        if gpu is None:
            return child
        child["gpu"] = gpu
        entry = self.offsets.get(gpu) or {}
        if entry.get("applied"):
            f = entry["offset"]
            child["gpu_offset"] = f
            child["step_times_ms"] = [t / f for t in child.get("step_times_ms") or []]
            if child.get("measure_window_ms"):
                child["measure_window_ms"] /= f
        return child


def _key(name: str, stack: list, profile: bool) -> tuple:
    return name, tuple(c.key for c in stack), bool(profile)


def _several_processes(stack: list) -> bool:
    from advisor import specs

    return specs.launch_nproc([s for c in stack for s in c.as_specs()]) > 1
