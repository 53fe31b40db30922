"""The Controller's parts (runner/controller.py) that are plain state: who this process is and
where it writes, where it is in its steps, what its start-up cost, what the hooks saw in the
step under way, and how it ends. No torch here; each part is read by name from the controller
(``ctl.clock.steps_seen``, ``ctl.run.dir``), so a reader shows which part it depends on."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from advisor.runner import ranks, tracebacks
from advisor.runner._util import one_line_exception
from advisor.runtime import world


@dataclass
class RunIdentity:
    """This process's rank and world, and where it writes: its run directory (rank r > 0's under
    ranks/), the TensorBoard directory its trace goes to, and the base trace_files are relative to."""

    rank: int
    world_size: int
    dir: str          # child.json, progress.jsonl
    name: str         # the run's name: "baseline", or the trial's
    cwd: str
    tb_dir: str       # <tb root>/<name>
    trace_base: str   # the tb root's parent (for trials, the main run dir whose tb/ they share)

    @classmethod
    def from_spec(cls, spec: dict) -> RunIdentity:
        base_dir = os.path.abspath(spec["run_dir"])  # the script may chdir
        # Under torch.distributed.run every rank has a runner; rank r > 0 writes under ranks/
        # (only when advisor launched them: a run of advisor itself under torchrun is one process)
        rank, world_size = world() if ranks.nproc(spec) > 1 else (0, 1)
        name = spec.get("run_name") or "baseline"
        tb_root = os.path.abspath(spec.get("tb_dir") or os.path.join(base_dir, "tb"))
        return cls(rank, world_size, ranks.rank_dir(base_dir, rank), name, spec.get("cwd") or os.getcwd(),
                   os.path.join(tb_root, name), os.path.dirname(tb_root))

    def relocate(self, spec: dict) -> None:
        """A process started ahead takes its trial's name and directory (runner/held.py)."""
        self.dir = os.path.abspath(spec["run_dir"])
        self.name = spec.get("run_name") or self.name
        tb_root = os.path.abspath(spec.get("tb_dir") or os.path.join(self.dir, "tb"))
        self.tb_dir = os.path.join(tb_root, self.name)
        self.trace_base = os.path.dirname(tb_root)


@dataclass
class StepClock:
    """The steps asked for (warm-up, timed, profiled) and where the run is among them."""

    warmup: int
    measure_n: int
    profile_n: int
    # a run that only warms up (the script's own profiler's run) stops here at the latest (0: never)
    max_steps: int = 0
    # A process started ahead on a guess (runner/held.py) that may use the GPU waits before
    # its last two warm-up steps (compiled and warmed up by then); else at its first CUDA
    # use (and may be advanced from there to this step later).
    hold_step: int | None = None
    total: int = 0           # the steps the run is expected to take (progress.jsonl's "total")
    profile_end: int = 0     # the step whose end writes the trace
    steps_seen: int = 0
    phase: str = "warmup"    # what the next step is: warmup | profile | measure | done
    settle: int = 0          # untimed steps left before the window opens
    settle_n: int = 0        # how many the window waited for (and the profiler warms up with)
    settled: int = 0
    step_source: str = "optimizer-hook"
    explicit: bool = False   # advisor.step() marks the steps: optimizer steps no longer do
    anchor: object = None    # weakref to the first optimizer that stepped

    @classmethod
    def from_spec(cls, spec: dict) -> StepClock:
        warmup = max(0, int(spec.get("warmup_steps", 5)))
        profile_n = max(0, int(spec.get("profile_steps", 3)))
        measure_n = max(0, int(spec.get("measure_steps", 20)))
        hold = spec.get("hold") and spec.get("hold_at") == "warmup"
        # One extra step warms the profiler up (its schedule's warmup) before the active ones.
        total = warmup + measure_n + (profile_n + 1 if profile_n else 0)
        return cls(warmup, measure_n, profile_n, max_steps=int(spec.get("max_steps") or 0),
                   hold_step=max(1, warmup - 2) if hold else None, total=total, profile_end=total)

    def hold_before_last_warmup_steps(self) -> None:
        """Held at its first CUDA use and told to go on (runner/held.py): hold again here."""
        self.hold_step = max(1, self.warmup - 2)

    def window_closed(self) -> None:
        """The timed window ended: what is left is the profiled steps with their warm-up."""
        self.total = self.steps_seen + (self.profile_n + 1 + self.settle_n if self.profile_n else 0)

    def profiling_from_here(self) -> int:
        """The profiler's warm-up steps from the next one (one more for each step the window
        waited to settle: Controller._enter_measure); the step that ends it is set."""
        warm = 1 + self.settle_n
        self.profile_end = self.steps_seen + warm + self.profile_n
        return warm


class StepObservations:
    """What the hooks (runner/hooks.py) report of the step under way; they call these methods
    and never write the fields."""

    def __init__(self):
        self.data_wait_s = 0.0      # seconds blocked in DataLoader __next__ this step
        self.item_wait_s = 0.0      # seconds in .item() on device tensors, timed window (Hooks._time_item)
        self.item_waits = 0
        self.batch_size: int | None = None
        self.batch_size_source: str | None = None
        # This step's DataLoader batches, backward calls and grad-enabled outermost forwards;
        # a row per warm-up step after the first, all hooks on (measure.micro_batches)
        self.micro = [0, 0, 0]
        self.micro_rows: list[list[int]] = []
        self.tokens: list[int] | None = None   # this step's batches' [real, all] tokens (runner/tokens.py)
        self.widths: set[int] = set()           # the masked batches' row widths seen

    def counted(self, i: int) -> None:
        """One more of this step's DataLoader batches (0), backward calls (1) or grad-enabled
        outermost forwards (2): its micro-batches (measure.micro_batches)."""
        self.micro[i] += 1

    def another_optimizer_stepped(self) -> None:
        """Not the anchor optimizer (a GAN's generator): the backward passes and forwards before
        its step were its own, not the anchor's accumulated micro-batches."""
        self.micro[1] = self.micro[2] = 0

    def waited_for_data(self, seconds: float) -> None:
        self.data_wait_s += seconds

    def saw_tokens(self, real: int, total: int, width: int) -> None:
        """A batch of this step holds these tokens (its attention mask's ones, and all), in
        rows this wide (a few of the widths seen are kept: batches cut to their longest vary)."""
        if len(self.widths) < 16:
            self.widths.add(width)
        if self.tokens is None:
            self.tokens = [0, 0]
        self.tokens[0] += real
        self.tokens[1] += total

    def take_tokens(self) -> list[int] | None:
        """This step's [real, all] tokens (None: its batches said nothing of them)."""
        t, self.tokens = self.tokens, None
        return t

    def waited_in_item(self, seconds: float) -> None:
        """Host time in .item() on a device tensor, inside the timed window."""
        self.item_wait_s += seconds
        self.item_waits += 1

    def saw_batch(self, size: int, source: str) -> None:
        """The batch size, from the training loader's first batch or the model's first input."""
        if self.batch_size is None:
            self.batch_size, self.batch_size_source = size, source

    def forget_batch(self) -> None:
        """The batch seen first was not the training loader's (a validation pass came first)."""
        self.batch_size = self.batch_size_source = None

    def step_ended(self, keep_counts: bool) -> None:
        if keep_counts:
            self.micro_rows.append(list(self.micro))
        self.micro[:] = [0, 0, 0]

    def take_data_wait(self) -> float:
        """This step's data wait, and the next step's starts from nothing."""
        s, self.data_wait_s = self.data_wait_s, 0.0
        return s

    def clear_waits(self) -> None:
        """The timed window opens (or is about to): its waits count from here."""
        self.data_wait_s = 0.0
        self.tokens = None
        self.item_wait_s, self.item_waits = 0.0, 0


def _exit(code, exception: str | None = None, stopped_by_advisor: bool = False) -> dict:
    return {"code": code, "exception": exception, "stopped_by_advisor": stopped_by_advisor}


@dataclass
class Outcome:
    """How the run is going and how it ended (child.json "stage" and "exit")."""

    stage: str = "started"   # started | warmup | timed | measured | finished-early
    exit: dict = field(default_factory=lambda: _exit(None))
    stop_requested: bool = False  # advisor has what it needs: the script is being stopped
    finishing: bool = False       # the script has ended: Controller.finish is saving
    refused: bool = False         # stopped because the trial's fixes refused to apply (Controller._refused)

    def stopped_by_advisor(self) -> None:
        self.stage = "measured"
        self.exit = _exit(0, stopped_by_advisor=True)

    def ended_by_itself(self, exc: BaseException | None) -> int:
        """The script ended before advisor stopped it, with exc (None: it ran to its end).
        Returns its exit code."""
        if exc is None:
            code, text = 0, None
        elif isinstance(exc, SystemExit):
            c = exc.code
            code = 0 if c is None else (c if isinstance(c, int) else 1)
            text = None
        elif isinstance(exc, KeyboardInterrupt):
            code, text = -2, "KeyboardInterrupt"
        else:
            code, text = 1, one_line_exception(exc)
        self.exit = _exit(code, text)
        failure = tracebacks.at_exit(exc)   # where it failed, while its frames are still there
        if failure is not None:
            self.exit["failure"] = failure
        if exc is None or isinstance(exc, SystemExit):
            self.stage = "finished-early"
        return code
