"""The child's torch.profiler session, a part of the Controller: started for the profiled steps,
stepped at their boundaries, stopped, and the traces it wrote listed for child.json. It reads
the controller's step clock, run identity (tb directory, rank), ranges and observer."""

from __future__ import annotations

import os
import warnings

import torch


class Profiling:
    def __init__(self, ctl, spec: dict):
        self.ctl = ctl
        self.prof = None             # the torch.profiler.profile while it runs
        self.driving = 0             # >0 while advisor itself calls torch.profiler (disarm.py lets it through)
        self.trace_files: list[str] = []  # relative to the run's trace base (RunIdentity.trace_base)
        self.record_memory = bool(spec.get("record_memory", True))
        self.with_stack = bool(spec.get("with_stack", False))
        # Shapes cost profiler time per op; off unless asked (TensorBoard's shape grouping).
        self.record_shapes = bool(spec.get("record_shapes", False))

    def after_fork(self) -> None:
        """A forked process (a DataLoader worker) has no profiler of its own to drive."""
        self.prof = None

    def start(self, sched_warmup: int) -> None:
        from torch.profiler import ProfilerActivity, schedule, tensorboard_trace_handler

        from advisor.runner.disarm import REAL_PROFILE

        ctl = self.ctl
        acts = [ProfilerActivity.CPU]
        try:
            # CUDA activity when the script uses CUDA (initialized it during warmup); when the
            # profiler starts before the script runs (warmup <= 1), when CUDA is available.
            started = ctl.clock.steps_seen > 0
            if torch.cuda.is_initialized() if started else torch.cuda.is_available():
                acts.append(ProfilerActivity.CUDA)
        except Exception:
            pass
        if ctl.observer is not None:
            ctl.observer.snapshot_backends()
        tb_dir = ctl.run.tb_dir
        os.makedirs(tb_dir, exist_ok=True)
        quiet = "KINETO_LOG_LEVEL" not in os.environ  # Kineto reads it once, at its init
        if quiet:
            os.environ["KINETO_LOG_LEVEL"] = "6"
        self.driving += 1
        try:
            self.prof = REAL_PROFILE(
                activities=acts,
                schedule=schedule(wait=0, warmup=sched_warmup, active=ctl.clock.profile_n, repeat=1),
                on_trace_ready=tensorboard_trace_handler(tb_dir, worker_name=self._worker_name(), use_gzip=True),
                record_shapes=self.record_shapes,
                profile_memory=self.record_memory,
                with_stack=self.with_stack,
            )
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                self.prof.start()
        finally:
            self.driving -= 1
            if quiet:
                os.environ.pop("KINETO_LOG_LEVEL", None)
        ctl.ranges.profiling = True
        if ctl.observer is not None:
            ctl.observer.want_forward = True  # input/parameters as they are while profiled
        ctl.progress("profiler-started", ctl.clock.steps_seen)

    def call(self, name: str) -> None:
        """prof.<name>() ("step", "stop"), let through the disarmed torch.profiler."""
        if self.prof is None:
            return
        self.driving += 1
        try:
            with warnings.catch_warnings():  # torch.profiler's notes are not the script's
                warnings.simplefilter("ignore", UserWarning)
                getattr(self.prof, name)()
        finally:
            self.driving -= 1

    def stop(self) -> None:
        if self.prof is None:
            return
        self.ctl.ranges.profiling = False
        try:
            self.call("stop")
        except Exception as e:
            self.ctl.internal_error("profiler stop", e)
        self.prof = None
        self._collect_traces()

    def _worker_name(self) -> str | None:
        """Each rank's trace file is named for its rank (TensorBoard's distributed view shows
        the ranks as its workers); a single process keeps torch's host_pid name."""
        run = self.ctl.run
        return f"rank{run.rank}" if run.world_size > 1 else None

    def _collect_traces(self) -> None:
        run = self.ctl.run
        mine = f"{self._worker_name()}." if run.world_size > 1 else ""
        try:
            names = sorted(n for n in os.listdir(run.tb_dir) if ".pt.trace.json" in n and n.startswith(mine))
        except OSError:
            names = []
        rel = os.path.relpath(run.tb_dir, run.trace_base)
        self.trace_files = [os.path.join(rel, n).replace(os.sep, "/") for n in names]
