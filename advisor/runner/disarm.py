"""Disarm the script's own torch.profiler sessions: two Kineto sessions cannot run at once, and
the script's would collide with advisor's. advisor keeps references to the real classes."""

from __future__ import annotations

import sys

import torch
import torch.autograd.profiler
import torch.profiler
import torch.profiler.profiler

REAL_PROFILE = torch.profiler.profile
REAL_AUTOGRAD_PROFILE = torch.autograd.profiler.profile

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
            if ctl._own_profiler or caller.startswith("torch."):
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


def install(ctl, obs, patcher) -> None:
    standin = _make_standin("torch.profiler.profile", REAL_PROFILE, ctl, obs)
    patcher.set(torch.profiler, "profile", standin)
    patcher.set(torch.profiler.profiler, "profile", standin)
    patcher.set(torch.autograd.profiler, "profile",
                _make_standin("torch.autograd.profiler.profile", REAL_AUTOGRAD_PROFILE, ctl, obs))
