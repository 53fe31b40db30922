"""Trial processes started ahead, on a guess of the next trial.

A trial process spends most of its life before its timed steps (docs/trials.md): python and
torch start, the script makes or loads its data, CUDA and the model come up, and a compiled
model compiles; its steps are timed and profiled for a few seconds at the end. Whatever the
next trial is, it runs the same script under
one of few stacks of fixes: the next rung on the stack with the fix now on trial if that one
is kept, or on the stack without it. So while a trial runs, advisor starts those guesses
(runner/held.py): each runs the script up to its first CUDA use and waits there, nothing of it
on the GPU, or, when the GPU memory of the trial and the guesses fits in GPU_SHARE of the
device, on through CUDA, compile and most of its warm-up, and waits before its last two
warm-up steps. The next trial takes the guess made on its exact spec and goes on from there;
wrong guesses are dropped. A guess that does not wait yet is stopped (SIGSTOP) while the
running trial's steps are timed or profiled, and so are the processes started ahead with
python and torch only (WarmChild); the window opens QUIET_S after the trial says so, for the
GPU work they queued before the stop to drain. A guess's warm-up cost (its compile time) is
measured beside another trial's start-up: it is not a figure to compare.

Only for a script that uses CUDA before its first step (the baseline shows it): elsewhere a
guess would have nowhere to wait and would train beside the trial being timed.
"""

from __future__ import annotations

import resource
import threading
from pathlib import Path

from advisor import fixes
from advisor.host import usable_cpus
from advisor.runner.ahead import HeldChild, WarmChild, spec_key, start_warm

# The trial running now: its guesses stop when its timed window opens and go on once its
# profile is written (runner/controller.py's progress stages).
PAUSE_AT = ("measuring",)
RESUME_AT = ("exporting", "measured", "done")
# A trial's window opens this long after it says "measuring": advisor reads that within its
# 0.1 s poll and stops the guesses; what they queued on the GPU before drains in the rest.
QUIET_S = 0.3
# Guesses go on into their warm-up (CUDA, compile, CUDA graphs: most of a compiled trial's
# start-up) when the GPU memory they and the running trial are expected to reserve, each the
# most the last finished run reserved times its batch-size factor plus its CUDA context (made
# outside torch's allocator), fits in this share of the device. Each estimate is a peak, the
# cudnn.benchmark search's workspaces included: while the peaks add up to less than the device,
# every allocation the trial made alone still succeeds beside the guesses, and so does each
# workspace its search tries (an algorithm whose workspace did not fit would be left out, and
# the measured step would change). The rest is room for estimates that come out short. A
# smaller share, behind one eager fp32 search's large peak, kept the 2x batch from compiling
# during the last rung (docs/trials.md).
GPU_SHARE = 0.8
CONTEXT_BYTES = 1 << 30


def uses_cuda_first(baseline: dict) -> bool:
    """The baseline initialized CUDA before its first step ended (a guess can wait there)."""
    at = baseline.get("startup") or {}
    init, first = at.get("cuda_init"), at.get("first_step")
    return isinstance(init, (int, float)) and (not isinstance(first, (int, float)) or init <= first)


def host_count(asked: int | None = None) -> int:
    """Guesses a trial: `asked` (--lookahead), else five on a host with 16 cores or more, three
    with 12, two with 8, one with 4, none below. (Past the two branches' next rungs and the
    reference's re-run, they cover what the rules may ask for on the new trace, and the
    process after next: advisor.trials.guesses.)"""
    if asked is not None:
        return max(0, asked)
    cpus = usable_cpus()
    return 5 if cpus >= 16 else 3 if cpus >= 12 else 2 if cpus >= 8 else 1 if cpus >= 4 else 0


def quiet_s(asked: int | None = None) -> float:
    """A trial's quiet gap before its window, wherever guesses may run beside it (the trial
    specs are made before the baseline shows whether they will: the repeat's guess starts
    with the baseline)."""
    return QUIET_S if host_count(asked) else 0.0


def default_count(baseline: dict, asked: int | None = None) -> int:
    """How many guesses to start for each trial: host_count, none when the baseline did not
    use CUDA before its first step, fewer when memory would not hold that many more copies of
    the largest process so far (each guess holds what the script made before using CUDA)."""
    if not uses_cuda_first(baseline):
        return 0
    n = host_count(asked)
    if asked is not None:
        return n
    avail = _mem_available()
    largest = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # kB on Linux
    while n and avail is not None and (n + 1) * largest > avail / 2:
        n -= 1
    return n


def _mem_available() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


class Lookahead:
    """The processes started ahead for the ladder: guesses (HeldChild) and spares (WarmChild,
    python and torch up: one for a trial no guess covers, one for each next guess)."""

    def __init__(self, run_dir: Path, count: int, cwd: str | None, stdout_to_stderr: bool, warm=None, held=None):
        self.dir = Path(run_dir) / "trials"
        self.count = count
        self.cwd, self.stdout_to_stderr = cwd, stdout_to_stderr
        self.spares: list[WarmChild] = [warm] if warm is not None else []
        self._lock = threading.Lock()   # spares are taken from the GPUs' threads too (spare)
        self.guesses: list[HeldChild] = [held] if held is not None else []
        self.made = len(self.guesses)  # guesses started
        self.used = 0   # guesses that were the next trial
        self.peak = 0   # the GPU memory the last finished run reserved at its peak (bytes)
        self.capacity = 0
        self.warmed = 0  # guesses that went on into their warm-up
        self.log: list[dict] = []  # each process and the guesses made while it ran
        self.running: dict | None = None  # the spec of the process running now
        self.running_peak = 0  # what it reserved through its warm-up (its "measuring" record)

    def note(self, child: dict) -> None:
        """A finished run's peak reserved GPU memory, and the device's capacity. The last run's,
        not the most of any: the guesses grow from the stack it ran, and one eager fp32 trial's
        cudnn.benchmark search can reserve many times what every other run does, which kept
        both batch-size guesses (2x and 4x that) from warming up for the rest of the ladder.
        A run that reserved nothing (no CUDA, crashed early) leaves the estimate as it was."""
        mem = child.get("memory") or {}
        self.peak = int(mem.get("max_reserved_bytes") or 0) or self.peak
        self.capacity = int(mem.get("capacity_bytes") or self.capacity or 0)

    def _fits(self, specs: list[dict], ready: list[bool] | None = None) -> list[bool]:
        """Which specs may run into their warm-up beside the first (the running trial's): as
        GPU memory allows, and one compiling guess at a time (compiles share the CPU: a trial
        compiling beside two compiling guesses warms up slower), two when the second is a batch
        size: they come last and each compiles a graph of its own; x4 compiling only once x2
        was released added its whole compile to the ladder's end (docs/trials.md).
        ready[i]: specs[i + 1]'s guess waits after its warm-up already: it holds its memory but
        compiles no more (were it counted as compiling, a warm 2x batch would keep the compiled
        reference from warming up, and that would compile on the critical path)."""
        if not (self.peak and self.capacity):
            return [False] * (len(specs) - 1)
        ready = ready or [False] * (len(specs) - 1)
        used, out, compiling = self.peak * _batch_factor(specs[0]) + CONTEXT_BYTES, [], 0
        for spec, done in zip(specs[1:], ready):
            need = self.peak * _batch_factor(spec) + CONTEXT_BYTES
            room = 2 if _batch_factor(spec) > 1 else 1
            busy = _compiles(spec) and not done
            out.append(done or (used + need <= GPU_SHARE * self.capacity and not (busy and compiling >= room)))
            used += need if out[-1] else 0
            compiling += out[-1] and busy
        return out

    def take(self, spec: dict) -> tuple[HeldChild | None, WarmChild | None]:
        """The guess made on this spec (held), else a spare to start it from (warm)."""
        key = spec_key(spec)
        for g in self.guesses:
            if g.key == key and g.alive():
                self.guesses.remove(g)
                self.used += 1
                return g, None
        return None, (self.spares.pop(0) if self.spares else None)

    def guess(self, running: dict, specs: list[dict] | None) -> None:
        """Start these guesses of what comes after `running`, most likely first; a guess made
        before on one of these specs goes on as it is (advanced into its warm-up when it now
        fits), the others are dropped. None: keep the guesses there (a timing-only re-run comes
        between). Then top the spares up."""
        self.running, self.running_peak = running, 0
        if specs is not None:
            specs = [s for s in specs if not _starts_fresh(s)][: self.count]
            old = {g.key: g for g in self.guesses if g.alive()}
            keys = [spec_key(spec) for spec in specs]
            fits = self._fits([running, *specs], [k in old and old[k].warmed_up() for k in keys])
            entry = {"process": running.get("run_name"), "guesses": [s.get("run_name") for s in specs],
                     "warm_up": [s.get("run_name") for s, f in zip(specs, fits) if f]}
            # which guesses go on from the last round, and which ended before their turn: a
            # trial that started late on a guess shows here whether its process was new
            going = [s.get("run_name") for s, k in zip(specs, keys) if k in old]
            lost = [g.spec.get("run_name") for g in self.guesses if not g.alive()]
            entry.update({k: v for k, v in (("on_its_way", going), ("lost", lost)) if v})
            self.log.append(entry)
            for g in self.guesses:
                if g.key not in keys or old.get(g.key) is not g:
                    g.close()
            self.guesses = []
            for spec, key, warmup in zip(specs, keys, fits):
                g = old.pop(key, None)
                if g is not None:  # already on its way
                    if warmup and g.advance():
                        self.warmed += 1
                    self.guesses.append(g)
                    continue
                self.made += 1
                self.warmed += warmup
                warm = self.spares.pop(0) if self.spares else None
                try:
                    self.guesses.append(HeldChild(spec, str(self.dir / f".ahead-{self.made}"), warm,
                                                  self.stdout_to_stderr, "warmup" if warmup else "cuda"))
                except OSError:  # no FIFO here, no process: the trial starts as before
                    break
        self._top_up()

    def _top_up(self) -> None:
        """Spares up to one for each process that may start next (1 + count)."""
        with self._lock:
            while len(self.spares) < 1 + self.count:
                warm = start_warm(self.cwd, self.stdout_to_stderr, str(self.dir.parent))
                if warm is None:  # no FIFO here (os.mkfifo): trials start cold
                    break
                self.spares.append(warm)

    def on_stage(self, stage: str, step: int = 0, info: dict | None = None) -> None:
        """run_child's on_progress for the trial running now. Its "measuring" record carries
        what it reserved through its warm-up: once its window is over, that is the estimate
        the guesses are fitted with again, and those that fit now go on into their warm-up.
        (A compiled trial may reserve a small part of what the eager stack before it reserved
        in its cudnn.benchmark search: fitted to the eager peak, the 4x batch guessed beside it
        could not warm up, and compiled its graph on the critical path: docs/trials.md.)"""
        if stage in PAUSE_AT:
            for p in [*self.guesses, *self.spares]:
                p.pause()
            self.running_peak = int((info or {}).get("reserved_bytes") or 0)
            self.capacity = int((info or {}).get("capacity_bytes") or self.capacity or 0)
        elif stage in RESUME_AT:
            self.resume()
            if self.running_peak and self.running is not None:
                self.peak, self.running_peak = self.running_peak, 0
                self._refit()

    def _refit(self) -> None:
        """Advance the guesses waiting at their first CUDA use that fit now."""
        waiting = [g for g in self.guesses if g.alive()]
        fits = self._fits([self.running, *(g.spec for g in waiting)], [g.warmed_up() for g in waiting])
        for g, fit in zip(waiting, fits):
            if fit and g.advance():
                self.warmed += 1
                if self.log:
                    self.log[-1].setdefault("warm_up_later", []).append(g.spec.get("run_name"))

    def resume(self) -> None:
        for p in [*self.guesses, *self.spares]:
            p.resume()

    def spare(self) -> WarmChild | None:
        """A spare (python and torch up) for a process that runs on a GPU of its own (trials.gpus),
        from any thread; another starts in its place, ready for the next such process."""
        with self._lock:
            warm = self.spares.pop(0) if self.spares else None
        self._top_up()
        return warm

    def close(self) -> None:
        for p in [*self.guesses, *self.spares]:
            p.close()
        self.guesses, self.spares = [], []

    def summary(self) -> dict:
        return {"count": self.count, "guessed": self.made, "used": self.used, "warmed_up": self.warmed,
                "log": self.log}


def _starts_fresh(spec: dict) -> bool:
    """A fix of the spec is never started ahead (Fix.fresh: a DALI pipeline, ddp's ranks)."""
    return any(fixes.trait(i.get("name"), "fresh") for i in spec.get("interventions") or [])


def _compiles(spec: dict) -> bool:
    return any(fixes.trait(i.get("name"), "compiles") for i in spec.get("interventions") or [])


def _batch_factor(spec: dict) -> int:
    return max([1, *(fixes.get(i["name"]).batch_factor(i.get("params") or {}) for i in spec.get("interventions") or []
                     if fixes.known(i.get("name")))])
