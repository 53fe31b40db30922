"""The child's stage machine: step boundaries, warmup → measure → profile, child.json and
progress.jsonl.

Measuring comes before profiling: on an H200 (torch 2.11) steps timed after a profiling
session in the same process ran 28% slower (10.5 → 13.4 ms, ResNet-18, three repeats;
tests/fixtures/traces/README.md), so timing after the profiler would charge its leftover
cost to the script. Patches live in hooks.py (steps, phases), observe.py (config) and disarm.py;
the profiler session in profiling.py."""

from __future__ import annotations

import os
import threading
import time
from time import perf_counter

from advisor.runner import environment, ranks
from advisor.runner._util import flush_std, one_line_exception
from advisor.runner.flops import StepFlops
from advisor.runner.lines import STOP_AFTER_STEPS
from advisor.runner.oneoffs import OneOffs
from advisor.runner.profiling import Profiling
from advisor.runner.ranges import Ranges
from advisor.runner.reporting import Reporting
from advisor.runner.window import Window, settle_steps
from advisor.runtime import world


class StopScript(BaseException):
    """Raised from a step hook once advisor has what it needs. A BaseException so that the
    script's own ``except Exception`` cannot swallow it."""


class Controller(Profiling, Reporting):
    def __init__(self, spec: dict):
        self.spec = spec
        base_dir = os.path.abspath(spec["run_dir"])  # the script may chdir
        # Under torch.distributed.run every rank has a runner; rank r > 0 writes under ranks/
        # (only when advisor launched them: a run of advisor itself under torchrun is one process)
        self.rank, self.world_size = world() if ranks.nproc(spec) > 1 else (0, 1)
        self.run_dir = ranks.rank_dir(base_dir, self.rank)
        os.makedirs(self.run_dir, exist_ok=True)
        self.run_name = spec.get("run_name") or "baseline"
        self.cwd = spec.get("cwd") or os.getcwd()
        self.warmup = max(0, int(spec.get("warmup_steps", 5)))
        self.profile_n = max(0, int(spec.get("profile_steps", 3)))
        self.measure_n = max(0, int(spec.get("measure_steps", 20)))
        # Short steps make a short window, and a short window is at the mercy of the host's
        # moment-to-moment speed: measure for at least measure_min_s (window.py).
        self.oneoffs = OneOffs()
        if self.world_size > 1:   # every rank stops at the same step: counted in steps alone (runner/ranks.py)
            self.window = Window(self.measure_n, 0.0, None)
        else:
            self.window = Window(self.measure_n, spec.get("measure_min_s", 0.0), self.oneoffs)
        self.settle = 0     # untimed steps left before the window opens
        self._settle_n = 0  # how many the window waited for (and the profiler warms up with)
        self.settled = 0
        # One extra step warms the profiler up (its schedule's warmup) before the active ones.
        self.total = self.warmup + self.measure_n + (self.profile_n + 1 if self.profile_n else 0)
        self.profile_end = self.total
        # A process started ahead on a guess (runner/held.py) that may use the GPU waits before
        # its last two warm-up steps (compiled and warmed up by then); else at its first CUDA
        # use (and may be advanced from there to this step later).
        self.hold_step = max(1, self.warmup - 2) if spec.get("hold") and spec.get("hold_at") == "warmup" else None
        self.record_memory = bool(spec.get("record_memory", True))
        self.with_stack = bool(spec.get("with_stack", False))
        # Shapes cost profiler time per op; off unless asked (TensorBoard's shape grouping).
        self.record_shapes = bool(spec.get("record_shapes", False))
        # Traces go to <tb root>/<run_name>; trace_files are relative to the tb root's parent
        # (the run dir; for trials, the main run dir whose tb/ they share via spec["tb_dir"]).
        tb_root = os.path.abspath(spec.get("tb_dir") or os.path.join(base_dir, "tb"))
        self.tb_dir = os.path.join(tb_root, self.run_name)
        self.trace_base = os.path.dirname(tb_root)

        self.ranges = Ranges()
        self.stage = "started"      # child.json stage
        self.phase = "warmup"       # what the next step is: warmup | profile | measure | done
        self.steps_seen = 0
        self.step_source = "optimizer-hook"
        self.explicit = False
        self.anchor = None          # weakref to the first optimizer that stepped
        self.pending = False        # a step ended (optimizer hook); committed at the next event
        self.stop_requested = False
        self.finishing = False

        self.warmup_step_times_ms: list[float] = []  # wall time, not synchronized
        # Wall-clock times (time.time()) of the start-up's milestones: where a process's first
        # seconds go (install, script, cuda_init, cuda_ready, first_step); the parent adds
        # spawned. Each trial pays them again, so they set the ladder's wall time.
        self.startup: dict[str, float] = {"install": time.time()}
        self.interventions_applied: list[str] = []
        self._t_warm = perf_counter()
        self.data_acc = 0.0         # seconds blocked in DataLoader __next__ this step
        self.item_wait_s = 0.0      # seconds in .item() on device tensors, timed window (Hooks._time_item)
        self.item_waits = 0

        self.cur_loss = None        # detached tensor .backward() was first called on this step
        self._loss_refs: list = []  # per step: tensor | float | None
        self.batch_size = None
        self.batch_size_source = None
        # This step's DataLoader batches, backward calls and grad-enabled outermost forwards;
        # a row per warm-up step after the first, all hooks on (measure.micro_batches)
        self.micro = [0, 0, 0]
        self.micro_rows: list[list[int]] = []

        self.config: dict = {}
        self.notes: list[str] = []
        self.trace_files: list[str] = []
        self.exit = {"code": None, "exception": None, "stopped_by_advisor": False}
        self.prof = None
        self._own_profiler = 0      # >0 while advisor itself drives torch.profiler
        self.script_profilers = None  # disarm.ScriptProfilers: the script's own, let work (spec own_profiler)
        # a run that only warms up (the script's own profiler's run) stops here at the latest (0: never)
        self.max_steps = int(spec.get("max_steps") or 0)
        self.flops = StepFlops(self) if spec.get("count_flops") else None  # one warm-up step's FLOPs
        self.observer = None        # observe.Observer
        self.sandbox = None         # sandbox.Sandbox (trials)
        self.hooks = None           # hooks.Hooks
        self.watch = None           # liveness.Watch: in a timed window with the loop hooks off
        self.lines = None           # lines.LineRecorder: the user's lines that ran (for the patch)
        self._progress = open(os.path.join(self.run_dir, "progress.jsonl"), "a", buffering=1,
                              encoding="utf-8")
        self._main_thread = threading.main_thread()
        self.forked = False
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._after_fork_in_child)

    def _after_fork_in_child(self) -> None:
        """A forked process (DataLoader worker, the script's own fork) is not the run: unhook."""
        self.forked = True
        self.pending = False
        if self.lines is not None:
            self.lines.after_fork()
        self.ranges.profiling = False
        self.prof = None
        if self.watch is not None:
            self.watch.after_fork()
        try:
            if self.hooks is not None:
                self.hooks.remove_all()
            if self.observer is not None:
                self.observer.uninstall()
        except Exception:
            pass

    # ------------------------------------------------------------------ what the hooks saw
    # runner/hooks.py reports through these; it never writes the controller's fields.
    def counted(self, i: int) -> None:
        """One more of this step's DataLoader batches (0), backward calls (1) or grad-enabled
        outermost forwards (2): its micro-batches (measure.micro_batches)."""
        self.micro[i] += 1

    def waited_for_data(self, seconds: float) -> None:
        self.data_acc += seconds

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

    def saw_loss(self, loss) -> None:
        """The tensor this step's first backward ran on (detached), or its stand-in."""
        if self.cur_loss is None:
            self.cur_loss = loss

    # ------------------------------------------------------------------ steps
    def start(self) -> None:
        """Called once the hooks are in place, just before the script runs."""
        self._t_warm = perf_counter()
        self.startup["script"] = time.time()
        self.progress("started", 0)
        self.save()
        if self.lines is not None:
            self.lines.start()
        if self.warmup == 0:
            self._after_warmup()

    def optimizer_stepped(self, opt) -> None:
        """Post-hook of an optimizer step: the anchor optimizer's step ends a training step."""
        if self.forked:
            return
        anchor = self.anchor
        if anchor is None:
            import weakref

            self.anchor = weakref.ref(opt)
            if self.observer is not None:
                self.observer.anchor_optimizer(opt)
        elif anchor() is not opt:
            # another optimizer's step (a GAN's generator): the backward passes and forwards
            # before it were its own, not the anchor's accumulated micro-batches
            self.micro[1] = self.micro[2] = 0
            return
        if self.explicit:
            return
        if self.phase == "measure" or self.phase == "done":
            self._boundary()    # no profiler work: take the time right here
        else:
            self.pending = True  # profiler.step() happens at the next event, outside Optimizer.step

    def explicit_step(self) -> None:
        if not self.explicit:
            self.explicit = True
            self.step_source = "advisor.step"
            self.pending = False
        self._boundary()

    def commit(self) -> None:
        """Process a pending step boundary (called at the start of each hooked event)."""
        if self.pending and not self.forked:
            self.pending = False
            self._boundary()

    def _boundary(self) -> None:
        if self.forked:
            return
        try:
            self._boundary_impl()
        except Exception as e:  # an advisor bug must not break the user's script
            self.internal_error("step boundary", e)

    def _boundary_impl(self) -> None:
        w = self.watch
        if w is not None and w.handle is not None:
            w.disarm()  # armed in a pause between steps (runner/liveness.py)
        n = self.steps_seen = self.steps_seen + 1
        if n >= STOP_AFTER_STEPS and self.lines is not None:
            self.lines.stop()
        if n == 1:
            self.startup["first_step"] = time.time()
            if self.hooks is not None:
                self.hooks.first_step()
        self._loss_refs.append(self.cur_loss)
        self.cur_loss = None
        phase = self.phase
        if phase == "warmup" and n > 1:
            self.micro_rows.append(list(self.micro))
        self.micro[:] = [0, 0, 0]
        if phase == "warmup":
            self._untimed_step()
            self.progress("warmup", n)
            if n == 1:
                self.stage = "warmup"
                self.save()
            if self.flops is not None:
                self.flops.at_boundary(n, self.warmup)
            if n == self.hold_step:
                from advisor.runner import held

                held.hold(self)
            if n >= self.warmup:
                self._after_warmup()
            elif self._own_traces_written() or (self.max_steps and n >= self.max_steps):
                self._done()
        elif phase == "profile":
            self.progress("profile", n)
            if n >= self.profile_end:
                self.progress("exporting", n)
                self._prof_call("step")  # RECORD_AND_SAVE → NONE: writes the trace
                self._stop_profiler()
                self._done()
            else:
                self._prof_call("step")
        elif phase == "measure" and self.settle:
            self._untimed_step()
            self.settle -= 1
            self.settled += 1
            if not self.settle:
                self.data_acc = 0.0
                self.item_wait_s, self.item_waits = 0.0, 0
                self.window.start()
        elif phase == "measure":
            counted = len(self.window.step_times_ms)
            last = self.window.step(self.data_acc)
            self.data_acc = 0.0
            if len(self.window.step_times_ms) > counted:
                self.progress("measure", n, step_ms=round(self.window.step_times_ms[-1], 3))
            else:
                self.progress("measure", n, left_out=True)  # a one-off step (runner/oneoffs.py)
            if last:
                self.total = self.steps_seen + (self.profile_n + 1 + self._settle_n if self.profile_n else 0)
                self.stage = "timed"
                self.save()
                if self.profile_n > 0:
                    self._enter_profile()
                else:
                    self._done()
        else:  # done: the script swallowed StopScript; stop it again
            if not self.finishing:
                self._stop_now()

    def _own_traces_written(self) -> bool:
        """A run for the script's own profiler: its sessions have written and stopped."""
        return self.script_profilers is not None and self.script_profilers.done(self.steps_seen)

    def _untimed_step(self) -> None:
        """A warm-up or settle step: its wall time, for the warm-up cost (measure.warmup_cost_s)."""
        t = perf_counter()
        self.warmup_step_times_ms.append((t - self._t_warm) * 1e3)
        self._t_warm = t

    def _after_warmup(self) -> None:
        if self.measure_n > 0:
            self._enter_measure()
        elif self.profile_n > 0:
            self._enter_profile()
        else:
            self._done()

    def _enter_profile(self) -> None:
        """Phase ranges back on, and the profiler started with one warmup step (one more for
        a compiled model, as the window had: see _enter_measure)."""
        self._stop_watch()
        if self.hooks is not None and not self.hooks.loop_active:
            self.hooks._install_loop_hooks()
        self.phase = "profile"
        warm = 1 + self._settle_n
        self.profile_end = self.steps_seen + warm + self.profile_n
        self._start_profiler(sched_warmup=warm)

    def _enter_measure(self) -> None:
        self.phase = "measure"
        if self.lines is not None:
            self.lines.stop()
        # A compiled model keeps the loop hooks in place, switched off (Hooks.remove_loop_hooks):
        # taking them away recompiled it (one such step took 808 ms inside a window of 4 ms
        # steps on an H100). Its settle step lets CUDA graph trees finish recording untimed.
        self._settle_n = settle_steps()
        if self.hooks is not None:
            self.hooks.remove_loop_hooks(keep_installed=self._settle_n > 0)
        if self.observer is not None:
            self.observer.snapshot_backends()
        self.save()
        # with its warm-up's peak: what guesses beside it may count on (Lookahead.on_stage)
        self.progress("measuring", self.steps_seen, **environment.reserved_so_far())
        quiet = float(self.spec.get("quiet_s") or 0.0)
        if quiet > 0:
            # Processes started ahead are stopped when advisor reads "measuring": let what
            # they had queued on the GPU drain before the window opens (runner/held.py).
            time.sleep(quiet)
        self.data_acc = 0.0
        self.item_wait_s, self.item_waits = 0.0, 0
        self.settle = self._settle_n
        if self.hooks is not None and not self._settle_n:
            # forwards go unseen now: a pause between timed steps arms a hook (runner/liveness.py)
            from advisor.runner.liveness import Watch

            self.watch = Watch(self)
            self.watch.start()
        self._t_warm = perf_counter()
        if not self.settle:
            self.window.start()

    def _stop_watch(self) -> None:
        if self.watch is not None:
            self.watch.stop()
            self.watch = None

    def _done(self) -> None:
        self._stop_watch()
        self.phase = "done"
        self.stage = "measured"
        self.stop_requested = True
        self.exit = {"code": 0, "exception": None, "stopped_by_advisor": True}
        self.save()
        self.progress("measured", self.steps_seen)
        if not self.finishing:
            self._stop_now()

    def _stop_now(self) -> None:
        if threading.current_thread() is not self._main_thread:
            # A StopScript here would only end this thread: results are saved, leave now.
            self.progress("done", self.steps_seen, status=self.stage)
            flush_std()
            os._exit(0)
        raise StopScript()

    # ------------------------------------------------------------------ end of the script
    def finish(self, exc: BaseException | None) -> bool:
        """Save final results. Returns True when advisor stopped the script (exit 0 now)."""
        self.finishing = True
        if self.lines is not None:
            self.lines.stop()
        stopped = self.stop_requested or isinstance(exc, StopScript)
        if not stopped:
            if self.pending:  # the last step ended (its optimizer stepped) before the script did
                self.pending = False
                self._boundary()
                stopped = self.stop_requested
        self._stop_profiler()
        self._stop_watch()
        if self.flops is not None:
            self.flops.finish()
        if self.hooks is not None:
            self.hooks.remove_all()
        if stopped:
            self.exit = {"code": 0, "exception": None, "stopped_by_advisor": True}
            self.stage = "measured"
        else:
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
            self.exit = {"code": code, "exception": text, "stopped_by_advisor": False}
            if exc is None or isinstance(exc, SystemExit):
                self.stage = "finished-early"
                if code == 0 and self.phase == "measure" and not self.settle and self.window.close_early():
                    # A window grown towards --min-time outlasted a short script (a batch-size
                    # trial halves its steps): the steps asked were timed, none profiled.
                    timed = len(self.window.step_times_ms)
                    self.note(f"the script ended inside the timed window after {timed} timed steps"
                              + (f" (of {self.measure_n} asked)" if timed < self.measure_n else "")
                              + ": those are kept; no steps were profiled after them")
                    self.stage = "measured"
        self.save()
        self.progress("done", self.steps_seen, status=self.stage)
        try:
            self._progress.close()
        except Exception:
            pass
        return stopped

