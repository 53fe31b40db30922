"""The child's torch.profiler session, as part of the Controller (a mixin: it reads the
controller's spec values, tb directory, ranges and observer): started for the profiled steps,
stepped at their boundaries, stopped, and the traces it wrote listed for child.json."""

from __future__ import annotations

import os
import warnings

import torch


class Profiling:
    def _start_profiler(self, sched_warmup: int) -> None:
        from torch.profiler import ProfilerActivity, schedule, tensorboard_trace_handler

        from advisor.runner.disarm import REAL_PROFILE

        acts = [ProfilerActivity.CPU]
        try:
            # CUDA activity when the script uses CUDA (initialized it during warmup); when the
            # profiler starts before the script runs (warmup <= 1), when CUDA is available.
            started = self.steps_seen > 0
            if torch.cuda.is_initialized() if started else torch.cuda.is_available():
                acts.append(ProfilerActivity.CUDA)
        except Exception:
            pass
        if self.observer is not None:
            self.observer.snapshot_backends()
        os.makedirs(self.tb_dir, exist_ok=True)
        quiet = "KINETO_LOG_LEVEL" not in os.environ  # Kineto reads it once, at its init
        if quiet:
            os.environ["KINETO_LOG_LEVEL"] = "6"
        self._own_profiler += 1
        try:
            self.prof = REAL_PROFILE(
                activities=acts,
                schedule=schedule(wait=0, warmup=sched_warmup, active=self.profile_n, repeat=1),
                on_trace_ready=tensorboard_trace_handler(self.tb_dir, worker_name=self._worker_name(), use_gzip=True),
                record_shapes=self.record_shapes,
                profile_memory=self.record_memory,
                with_stack=self.with_stack,
            )
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                self.prof.start()
        finally:
            self._own_profiler -= 1
            if quiet:
                os.environ.pop("KINETO_LOG_LEVEL", None)
        self.ranges.profiling = True
        if self.observer is not None:
            self.observer.want_forward = True  # input/parameters as they are while profiled
        self.progress("profiler-started", self.steps_seen)

    def _prof_call(self, name: str) -> None:
        if self.prof is None:
            return
        self._own_profiler += 1
        try:
            with warnings.catch_warnings():  # torch.profiler's notes are not the script's
                warnings.simplefilter("ignore", UserWarning)
                getattr(self.prof, name)()
        finally:
            self._own_profiler -= 1

    def _stop_profiler(self) -> None:
        if self.prof is None:
            return
        self.ranges.profiling = False
        try:
            self._prof_call("stop")
        except Exception as e:
            self.internal_error("profiler stop", e)
        self.prof = None
        self._collect_traces()

    def _worker_name(self) -> str | None:
        """Each rank's trace file is named for its rank (TensorBoard's distributed view shows
        the ranks as its workers); a single process keeps torch's host_pid name."""
        return f"rank{self.rank}" if self.world_size > 1 else None

    def _collect_traces(self) -> None:
        mine = f"{self._worker_name()}." if self.world_size > 1 else ""
        try:
            names = sorted(n for n in os.listdir(self.tb_dir) if ".pt.trace.json" in n and n.startswith(mine))
        except OSError:
            names = []
        rel = os.path.relpath(self.tb_dir, self.trace_base)
        self.trace_files = [os.path.join(rel, n).replace(os.sep, "/") for n in names]
