"""Getting ready for the trials while the baseline runs: the first trial process (the
baseline's repeat) starts with the baseline, on its known spec, and waits at the script's
first CUDA use (runner.ahead.HeldChild, as advisor.trials.lookahead's guesses do); it is stopped while
the baseline's steps are timed and profiled. The parent imports what the ladder needs (the
interventions import torch: seconds on a GPU host) and a spare process starts (runner.ahead.WarmChild)
once the baseline's timed window has closed, so they cannot slow the steps it times; they
overlap its profiling, its trace export and the parent's analysis of it."""

from __future__ import annotations

import threading

from advisor.trials.lookahead import PAUSE_AT, RESUME_AT

# Stages the baseline reaches after its timed window (the window comes before the profile).
AFTER_WINDOW = ("profiler-started", "profile", "exporting", "measured", "done")


class TrialsPrep:
    def __init__(self, cwd: str | None, stdout_to_stderr: bool, repeat: dict | None = None,
                 where: str | None = None, root: str | None = None):
        """repeat: the repeat's spec, started now in `where` when given (lookahead.host_count);
        root: the run directory, which the sandboxed processes keep real."""
        self.cwd, self.stdout_to_stderr, self.root = cwd, stdout_to_stderr, root
        self.warm = None
        self.held = None
        self.started = False
        if repeat is not None and where is not None:
            from advisor.runner.ahead import HeldChild

            try:
                self.held = HeldChild(repeat, where, None, stdout_to_stderr)
            except OSError:  # no FIFO here: the repeat starts from a spare, as before
                self.held = None

    def on_stage(self, stage: str) -> None:
        if self.held is not None:
            if stage in PAUSE_AT:
                self.held.pause()
            elif stage in RESUME_AT:
                self.held.resume()
        if self.started or stage not in AFTER_WINDOW:
            return
        self.started = True
        from advisor.runner.ahead import (
            start_warm,  # here, before the thread imports the rest
        )

        threading.Thread(target=_import_ladder, daemon=True).start()
        self.warm = start_warm(self.cwd, self.stdout_to_stderr, self.root)

    def take_warm(self):
        """The process started ahead, for the first trial (None: it starts cold)."""
        warm, self.warm = self.warm, None
        return warm

    def take_held(self):
        """The repeat started with the baseline (None: there is none)."""
        held, self.held = self.held, None
        if held is not None:
            held.resume()
        return held

    def drop_held(self) -> None:
        """The repeat's spec no longer holds (a short script's schedule changed it)."""
        if self.held is not None:
            self.held.close()
            self.held = None

    def close(self) -> None:
        for p in (self.warm, self.held):
            if p is not None:
                p.close()
        self.warm = self.held = None


def _import_ladder() -> None:
    try:
        from advisor import fixes, patch, trials  # noqa: F401

        for fix in fixes.all_fixes():
            if fix.runtime:
                fix.module()
    except Exception:  # the ladder imports them again itself, and reports what fails
        pass
