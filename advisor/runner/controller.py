"""The child's stage machine: step boundaries, warmup → measure → profile, child.json and
progress.jsonl.

Measuring comes before profiling: steps timed after a profiling session in the same process
run slower (docs/measurement.md), so timing after the profiler would charge its leftover cost
to the script. Patches live in hooks.py (steps, phases), observe.py (config) and disarm.py;
the profiler session in profiling.py; the controller's plain-state parts in state.py."""

from __future__ import annotations

import os
import threading
import time

from advisor.runner import environment
from advisor.runner._util import flush_std
from advisor.runner.flops import StepFlops
from advisor.runner.lines import STOP_AFTER_STEPS
from advisor.runner.losses import LossLog
from advisor.runner.oneoffs import OneOffs
from advisor.runner.profiling import Profiling
from advisor.runner.ranges import Ranges
from advisor.runner.reporting import Notes, ProgressLog, save_child_doc
from advisor.runner.startup import StartupTimeline
from advisor.runner.state import Outcome, RunIdentity, StepClock, StepObservations
from advisor.runner.window import Window, settle_steps
from advisor.runtime import NOT_APPLIED


class StopScript(BaseException):
    """Raised from a step hook once advisor has what it needs. A BaseException so that the
    script's own ``except Exception`` cannot swallow it."""


class Controller:
    """The stage machine, composed of its parts: the run's identity (``run``), its step clock
    (``clock``), what the hooks saw of the step under way (``seen``), the loss log (``losses``),
    the start-up timeline (``startup``), the profiler session (``profiling``), the progress log
    and the notes, and how it ends (``outcome``); and the machinery session.install attaches
    (observer, hooks, sandbox, lines, script_profilers)."""

    def __init__(self, spec: dict):
        self.spec = spec
        self.run = RunIdentity.from_spec(spec)
        os.makedirs(self.run.dir, exist_ok=True)
        self.clock = StepClock.from_spec(spec)
        self.startup = StartupTimeline()
        # A step ended (optimizer hook) and is committed at the next hooked event: every hook
        # reads this first, so it sits here, not in the clock.
        self.pending = False
        self.forked = False  # this is a forked copy (a DataLoader worker): it records nothing
        self.seen = StepObservations()
        self.losses = LossLog()
        self.outcome = Outcome()
        self.notes = Notes()
        self.interventions_applied: list[str] = []
        self.progress_log = ProgressLog(self.run.dir)
        self.profiling = Profiling(self, spec)
        self.ranges = Ranges()
        # Short steps make a short window, and a short window is at the mercy of the host's
        # moment-to-moment speed: measure for at least measure_min_s (window.py).
        self.oneoffs = OneOffs()
        if self.run.world_size > 1:   # every rank stops at the same step: counted in steps alone (runner/ranks.py)
            self.window = Window(self.clock.measure_n, 0.0, None)
        else:
            self.window = Window(self.clock.measure_n, spec.get("measure_min_s", 0.0), self.oneoffs,
                                 max_s=spec.get("measure_max_s"))
        self.flops = StepFlops(self) if spec.get("count_flops") else None  # one warm-up step's FLOPs
        # Attached by session.install, or later:
        self.observer = None        # observe.Observer
        self.hooks = None           # hooks.Hooks
        self.sandbox = None         # sandbox.Sandbox (trials)
        self.created = None         # created.Created: the paths the baseline makes (the baseline)
        self.lines = None           # lines.LineRecorder: the user's lines that ran (for the patch)
        self.script_profilers = None  # disarm.ScriptProfilers: the script's own, let work (spec own_profiler)
        self.watch = None           # liveness.Watch: in a timed window with the loop hooks off
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._after_fork_in_child)

    def _after_fork_in_child(self) -> None:
        """A forked process (DataLoader worker, the script's own fork) is not the run: unhook."""
        self.forked = True
        self.pending = False
        self.progress_log.after_fork()
        if self.lines is not None:
            self.lines.after_fork()
        self.ranges.profiling = False
        self.profiling.after_fork()
        if self.watch is not None:
            self.watch.after_fork()
        try:
            if self.hooks is not None:
                self.hooks.remove_all()
            if self.observer is not None:
                self.observer.uninstall()
        except Exception:
            pass
        if self.sandbox is not None:
            # The observer's open, undone above, lay under the sandbox's: undoing it put the
            # real open back. The worker's writes are the script's: the sandbox again.
            self.sandbox.install()

    # ------------------------------------------------------------------ what the run says
    def progress(self, stage: str, step: int, **info) -> None:
        if not self.forked:
            self.progress_log.record(stage, step, self.clock.total, **info)

    def note(self, text: str) -> None:
        self.notes.add(text)
        if text.startswith(NOT_APPLIED) and not self.forked:
            self._refused()

    def _refused(self) -> None:
        """A trial's process whose new fixes (spec stop_if_refused) have all refused to apply
        would time the stack before them again: it stops now, measured as it stands (no
        steps), and the ladder records the trial skipped with their reasons."""
        names = set(self.spec.get("stop_if_refused") or ())
        if not names or self.outcome.stop_requested or self.outcome.finishing:
            return
        refused = {line.split(":", 2)[1].strip() for line in self.notes.lines if line.startswith(NOT_APPLIED)}
        if names <= refused:
            self.outcome.refused = True
            self.notes.add(f"stopped at step {self.clock.steps_seen}: every fix this trial adds refused to apply")
            self._done()

    def internal_error(self, where: str, exc: BaseException) -> None:
        self.notes.internal_error(where, exc)

    def save(self) -> None:
        if not self.forked:
            save_child_doc(self)
            if self.created is not None:
                self.created.save()

    # ------------------------------------------------------------------ steps
    def start(self) -> None:
        """Called once the hooks are in place, just before the script runs."""
        self.startup.restart()
        self.startup.mark("script")
        self.progress("started", 0)
        self.save()
        if self.lines is not None:
            self.lines.start()
        if self.clock.warmup == 0:
            self._after_warmup()

    def optimizer_stepped(self, opt) -> None:
        """Post-hook of an optimizer step: the anchor optimizer's step ends a training step."""
        if self.forked:
            return
        clock = self.clock
        anchor = clock.anchor
        if anchor is None:
            import weakref

            clock.anchor = weakref.ref(opt)
            if not clock.explicit:   # its steps from here, whatever counted the earlier ones
                clock.step_source = "optimizer-hook"
            if self.observer is not None:
                self.observer.anchor_optimizer(opt)
        elif anchor() is not opt:
            self.seen.another_optimizer_stepped()  # a GAN's generator
            return
        if clock.explicit:
            return
        if clock.phase == "measure" or clock.phase == "done":
            self._boundary()    # no profiler work: take the time right here
        else:
            self.pending = True  # profiler.step() happens at the next event, outside Optimizer.step

    def explicit_step(self) -> None:
        clock = self.clock
        if not clock.explicit:
            clock.explicit = True
            clock.step_source = "advisor.step"
            self.pending = False
            self.optimizer_made()
        self._boundary()

    def optimizer_made(self) -> None:
        """The script made a torch.optim optimizer (or marks its own steps): steps are not
        counted from the parameters' updates (runner/updates.py)."""
        if self.hooks is not None and self.hooks.updates.on:
            self.hooks.updates.off()

    def parameters_updated(self) -> None:
        """No optimizer steps, and the parameters the last backward produced gradients for have
        changed since (runner/updates.py): a step ended. Seen at the start of a hooked event
        (the next backward, outermost forward or batch), outside any range: taken here."""
        if self.forked:
            return
        self.clock.step_source = "parameter-update"
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
        clock = self.clock
        n = clock.steps_seen = clock.steps_seen + 1
        if n >= STOP_AFTER_STEPS and self.lines is not None:
            self.lines.stop()
        if n == 1:
            self.startup.mark("first_step")
            if self.hooks is not None:
                self.hooks.first_step()
        self.losses.step_ended()
        phase = clock.phase
        self.seen.step_ended(keep_counts=phase == "warmup" and n > 1)
        if phase == "warmup":
            self._warmup_step_ended(n)
        elif phase == "profile":
            self._profiled_step_ended(n)
        elif phase == "measure" and clock.settle:
            self._settle_step_ended()
        elif phase == "measure":
            self._timed_step_ended(n)
        elif not self.outcome.finishing:  # done: the script swallowed StopScript; stop it again
            self._stop_now()

    def _warmup_step_ended(self, n: int) -> None:
        self.startup.untimed_step()
        self.progress("warmup", n)
        if n == 1:
            self.outcome.stage = "warmup"
            self.save()
        clock = self.clock
        if self.flops is not None:
            self.flops.at_boundary(n, clock.warmup)
        if n == clock.hold_step:
            from advisor.runner import held

            held.hold(self)
        if n >= clock.warmup:
            self._after_warmup()
        elif self._own_traces_written() or (clock.max_steps and n >= clock.max_steps):
            self._done()

    def _profiled_step_ended(self, n: int) -> None:
        self.progress("profile", n)
        if n >= self.clock.profile_end:
            self.progress("exporting", n)
            self.profiling.call("step")  # RECORD_AND_SAVE → NONE: writes the trace
            self.profiling.stop()
            self._done()
        else:
            self.profiling.call("step")

    def _settle_step_ended(self) -> None:
        self.startup.untimed_step()
        clock = self.clock
        clock.settle -= 1
        clock.settled += 1
        if not clock.settle:
            self.seen.clear_waits()
            self.window.start()

    def _timed_step_ended(self, n: int) -> None:
        window = self.window
        counted = len(window.step_times_ms)
        last = window.step(self.seen.take_data_wait(), self.seen.take_tokens())
        if len(window.step_times_ms) > counted:
            self.progress("measure", n, step_ms=round(window.step_times_ms[-1], 3))
        else:
            self.progress("measure", n, left_out=True)  # a one-off step (runner/oneoffs.py)
        if last:
            self.clock.window_closed()
            if window.closed_by == "budget":
                self.note(f"the timed window closed at {window.window_ms / 1e3:.0f} s, its share of the analyze's "
                          f"budget: {len(window.step_times_ms)} of the {window.steps} steps asked timed "
                          f"(a longer --budget times more)")
            self.outcome.stage = "timed"
            self.save()
            if self.clock.profile_n > 0:
                self._enter_profile()
            else:
                self._done()

    def _own_traces_written(self) -> bool:
        """A run for the script's own profiler: its sessions have written and stopped."""
        return self.script_profilers is not None and self.script_profilers.done(self.clock.steps_seen)

    def _after_warmup(self) -> None:
        if self.clock.measure_n > 0:
            self._enter_measure()
        elif self.clock.profile_n > 0:
            self._enter_profile()
        else:
            self._done()

    def _enter_profile(self) -> None:
        """Phase ranges back on, and the profiler started with one warmup step (one more for
        each settle step: _enter_measure)."""
        self._stop_watch()
        if self.hooks is not None and not self.hooks.loop_active:
            self.hooks._install_loop_hooks()
        self.clock.phase = "profile"
        self.profiling.start(sched_warmup=self.clock.profiling_from_here())

    def _enter_measure(self) -> None:
        clock = self.clock
        clock.phase = "measure"
        if self.lines is not None:
            self.lines.stop()
        # A compiled model keeps the loop hooks in place, switched off (Hooks.remove_loop_hooks):
        # taking them away recompiles it, inside the window. Its settle step lets CUDA graph
        # trees finish recording untimed.
        clock.settle_n = settle_steps()
        if self.hooks is not None:
            self.hooks.remove_loop_hooks(keep_installed=clock.settle_n > 0)
        if self.observer is not None:
            self.observer.snapshot_backends()
        self.save()
        # with its warm-up's peak: what guesses beside it may count on (Lookahead.on_stage)
        self.progress("measuring", clock.steps_seen, **environment.reserved_so_far())
        quiet = float(self.spec.get("quiet_s") or 0.0)
        if quiet > 0:
            # Processes started ahead are stopped when advisor reads "measuring": let what
            # they had queued on the GPU drain before the window opens (runner/held.py).
            time.sleep(quiet)
        self.seen.clear_waits()
        clock.settle = clock.settle_n
        if self.hooks is not None and not clock.settle_n:
            # forwards go unseen now: a pause between timed steps arms a hook (runner/liveness.py)
            from advisor.runner.liveness import Watch

            self.watch = Watch(self)
            self.watch.start()
        self.startup.restart()
        if not clock.settle:
            self.window.start()

    def _stop_watch(self) -> None:
        if self.watch is not None:
            self.watch.stop()
            self.watch = None

    def _done(self) -> None:
        self._stop_watch()
        self.clock.phase = "done"
        self.outcome.stop_requested = True
        self.outcome.stopped_by_advisor()
        self.save()
        self.progress("measured", self.clock.steps_seen)
        if not self.outcome.finishing:
            self._stop_now()

    def _stop_now(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            # A StopScript here would only end this thread: results are saved, leave now.
            self.progress("done", self.clock.steps_seen, status=self.outcome.stage)
            flush_std()
            os._exit(0)
        raise StopScript()

    # ------------------------------------------------------------------ end of the script
    def finish(self, exc: BaseException | None) -> bool:
        """Save final results. Returns True when advisor stopped the script (exit 0 now)."""
        outcome = self.outcome
        outcome.finishing = True
        if self.lines is not None:
            self.lines.stop()
        stopped = outcome.stop_requested or isinstance(exc, StopScript)
        if not stopped and self.pending:  # the last step ended (its optimizer stepped) before the script did
            self.pending = False
            self._boundary()
            stopped = outcome.stop_requested
        if not stopped and self.hooks is not None and self.hooks.updates.changed():  # its update, with no optimizer
            self.parameters_updated()
            stopped = outcome.stop_requested
        self.profiling.stop()
        self._stop_watch()
        if self.flops is not None:
            self.flops.finish()
        if self.hooks is not None:
            self.hooks.remove_all()
        if stopped:
            outcome.stopped_by_advisor()
        elif outcome.ended_by_itself(exc) == 0 and (exc is None or isinstance(exc, SystemExit)):
            self._keep_a_window_cut_short()
        self.save()
        self.progress("done", self.clock.steps_seen, status=outcome.stage)
        self.progress_log.close()
        return stopped

    def _keep_a_window_cut_short(self) -> None:
        """The script ended by itself (exit code 0) inside a timed window grown towards --min-time
        (a batch-size trial halves its steps): the steps asked were timed, none profiled."""
        if self.clock.phase == "measure" and not self.clock.settle and self.window.close_early():
            timed = len(self.window.step_times_ms)
            measure_n = self.clock.measure_n
            self.note(f"the script ended inside the timed window after {timed} timed steps"
                      + (f" (of {measure_n} asked)" if timed < measure_n else "")
                      + ": those are kept; no steps were profiled after them")
            self.outcome.stage = "measured"
