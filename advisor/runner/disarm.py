"""Disarm the script's own torch.profiler sessions: two Kineto sessions cannot run at once, and
the script's would collide with advisor's. advisor keeps references to the real classes."""

from __future__ import annotations

import os
import sys

import torch
import torch.autograd.profiler
import torch.profiler
import torch.profiler.profiler

REAL_PROFILE = torch.profiler.profile
REAL_AUTOGRAD_PROFILE = torch.autograd.profiler.profile

# Steps a cycling session of the script's runs on after its first trace before advisor stops it.
CYCLING_STEPS = 20
_MESSAGE = "[advisor: this torch.profiler session was disarmed; see advisor's report]"


class _NoEvents(list):
    """What key_averages()/events() return: empty, printable, with a table()."""

    def table(self, *args, **kwargs) -> str:
        return _MESSAGE

    def __str__(self) -> str:
        return _MESSAGE

    __repr__ = __str__

    def total_average(self):
        return None


def _make_standin(label: str, real, ctl, obs):
    class DisarmedProfile:
        """No-op stand-in for the script's profiler (advisor is already profiling)."""

        def __new__(cls, *args, **kwargs):
            try:
                caller = sys._getframe(1).f_globals.get("__name__", "") or ""
            except ValueError:
                caller = ""
            if ctl.profiling.driving or caller.startswith("torch."):
                return real(*args, **kwargs)  # torch's own use, or advisor's
            return super().__new__(cls)

        def __init__(self, *args, **kwargs):
            self.step_num = 0
            self.enabled = False
            where = None
            try:
                where = obs.site()
            except Exception:
                pass
            ctl.note(f"disarmed the script's {label} ({where or 'unknown site'}): "
                     "it would collide with advisor's")

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def start(self):
            return None

        def stop(self):
            return None

        def step(self):
            self.step_num += 1

        def key_averages(self, *args, **kwargs):
            return _NoEvents()

        def events(self):
            return _NoEvents()

        def table(self, *args, **kwargs):
            return _MESSAGE

        def export_chrome_trace(self, path):
            return None

        def export_stacks(self, *args, **kwargs):
            return None

        def export_memory_timeline(self, *args, **kwargs):
            return None

        def add_metadata(self, *args, **kwargs):
            return None

        def add_metadata_json(self, *args, **kwargs):
            return None

        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return lambda *a, **k: None

        def __str__(self):
            return _MESSAGE

    DisarmedProfile.__name__ = DisarmedProfile.__qualname__ = "profile"
    DisarmedProfile.__module__ = real.__module__
    return DisarmedProfile


class ScriptProfilers:
    """The script's own profiler sessions in a run that lets them work (spec ``own_profiler``):
    advisor profiles nothing there, and stops the script at the first step after they have
    written their traces. What they write goes where the script asked, past the sandbox."""

    def __init__(self, ctl):
        self.ctl = ctl
        self.live = 0            # sessions started and not stopped
        self.made = 0
        self.exports: list[str] = []
        self.first_export_step: int | None = None

    def doc(self) -> dict:
        return {"sessions": self.made, "running": self.live, "exports": list(self.exports)}

    def done(self, step: int) -> bool:
        """At a step boundary: the sessions have written and stopped, or one that cycles on
        (a schedule with repeat=0) has gone CYCLING_STEPS steps past its first trace."""
        if not self.exports:
            return False
        if self.first_export_step is None:
            self.first_export_step = step
        return not self.live or step - self.first_export_step >= CYCLING_STEPS

    def allow(self, path, make: bool = False) -> None:
        """A path the script's profiler writes: out of the sandbox's reach."""
        sb = self.ctl.sandbox
        if sb is not None:
            sb.allow(path, make)

    def recording(self, real):
        profilers = self

        class ScriptProfile(real):
            def start(self):
                profilers.made += 1
                profilers.live += 1
                return super().start()

            def stop(self):
                try:
                    return super().stop()
                finally:
                    profilers.live = max(0, profilers.live - 1)

            def export_chrome_trace(self, path, *args, **kwargs):
                profilers.allow(os.path.dirname(os.path.abspath(path)))
                out = super().export_chrome_trace(path, *args, **kwargs)
                profilers.exports.append(os.path.abspath(path))
                return out

        ScriptProfile.__name__ = ScriptProfile.__qualname__ = real.__name__
        ScriptProfile.__module__ = real.__module__
        return ScriptProfile


def _allowing_handler(real_handler, profilers: ScriptProfilers):
    """tensorboard_trace_handler's directory (it makes it in Python, the trace is written by
    Kineto in C++: a sandboxed mkdir alone would leave the write nowhere to go)."""
    def tensorboard_trace_handler(dir_name, *args, **kwargs):
        profilers.allow(dir_name, make=True)
        return real_handler(dir_name, *args, **kwargs)
    return tensorboard_trace_handler


def install(ctl, obs, patcher, pass_through: bool = False) -> None:
    if pass_through:
        profilers = ctl.script_profilers = ScriptProfilers(ctl)
        recording = profilers.recording(REAL_PROFILE)
        patcher.set(torch.profiler, "profile", recording)
        patcher.set(torch.profiler.profiler, "profile", recording)
        handler = _allowing_handler(torch.profiler.profiler.tensorboard_trace_handler, profilers)
        patcher.set(torch.profiler, "tensorboard_trace_handler", handler)
        patcher.set(torch.profiler.profiler, "tensorboard_trace_handler", handler)
        return
    standin = _make_standin("torch.profiler.profile", REAL_PROFILE, ctl, obs)
    patcher.set(torch.profiler, "profile", standin)
    patcher.set(torch.profiler.profiler, "profile", standin)
    patcher.set(torch.autograd.profiler, "profile",
                _make_standin("torch.autograd.profiler.profile", REAL_AUTOGRAD_PROFILE, ctl, obs))
