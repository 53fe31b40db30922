"""Getting ready for the trials while the baseline finishes: the parent imports what the ladder
needs (the interventions import torch: ~3 s on a GPU host) and the first trial's process (the
baseline's repeat) starts and imports torch (runner.ahead.WarmChild). Both begin once the baseline's
timed window has closed (at its profile, or its end), so they cannot slow the steps it times;
they overlap its profiling, its trace export and the parent's analysis of it."""

from __future__ import annotations

import threading

# Stages the baseline reaches after its timed window (the window comes before the profile).
AFTER_WINDOW = ("profiler-started", "profile", "exporting", "measured", "done")


class TrialsPrep:
    def __init__(self, cwd: str | None, stdout_to_stderr: bool):
        self.cwd, self.stdout_to_stderr = cwd, stdout_to_stderr
        self.warm = None
        self.started = False

    def on_stage(self, stage: str) -> None:
        if self.started or stage not in AFTER_WINDOW:
            return
        self.started = True
        from advisor.runner.ahead import start_warm  # here, before the thread imports the rest

        threading.Thread(target=_import_ladder, daemon=True).start()
        self.warm = start_warm(self.cwd, self.stdout_to_stderr)

    def take_warm(self):
        """The process started ahead, for the first trial (None: it starts cold)."""
        warm, self.warm = self.warm, None
        return warm

    def close(self) -> None:
        if self.warm is not None:
            self.warm.close()
            self.warm = None


def _import_ladder() -> None:
    try:
        from advisor import interventions, patch, trials  # noqa: F401

        for name in interventions.MODULES:
            interventions.get(name)
    except Exception:  # the ladder imports them again itself, and reports what fails
        pass
