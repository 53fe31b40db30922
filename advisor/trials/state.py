"""What the measurements after the ladder and the guesses of what comes next are given: typed
contracts, so that they read named state instead of the ladder's internals."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from advisor.trials.candidates import Candidate

REPEAT = "00-baseline-repeat"  # the baseline timed again, with the trials' seed: the noise
# Extra (reference, trial) timing rounds for a gain inside the noise band.
CONFIRM_ROUNDS = 2
CUT_SHORT = "interrupted (Ctrl-C) before it finished"


class Interrupted(KeyboardInterrupt):
    """Ctrl-C: a process it stopped before the process had measured (discarded), or one that
    was not started after it. Whatever the ladder had judged is kept."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


@dataclass(frozen=True)
class Reference:
    """What a trial is judged against: the reference's runs, the runs whose losses it is held
    to, and the run-to-run noise of the comparison."""
    runs: list[dict]
    loss: dict
    noise: float


@dataclass(frozen=True)
class After:
    """The ladder's outcome, for what is measured on top of it (apart trials, the ceiling):
    its kept stack, the baseline, where to judge, and how to run one more process."""
    stack: list[Candidate]
    base: dict
    environment: dict
    reference: Reference
    process: Callable[..., tuple]          # (name, stack, profile=True, guesses=None) -> (child, analysis, model)
    out_of_budget: Callable[..., bool]   # TrialContext.out_of_budget
    ahead: int                             # processes started ahead (0: none)
    only: set[str] | None = None           # --fix: the trials the user asked for
    applied: tuple = ()                    # --apply: {"name", "params"} under every run
    then: tuple = ()                       # (name, stack, profile) of the processes after these: guessed beside them


class LadderView(Protocol):
    """The ladder's state the guesses read (advisor.trials.guesses) to name the processes
    likely to come next; _Ladder implements it."""
    ctx: object
    base: dict
    stack: list[Candidate]
    queue: list[Candidate]
    tried: set[str]
    rejected: dict[str, Candidate]
    slow: dict[str, tuple[float, float | None]]
    bound: dict[str, Candidate]
    dropped: dict[str, Candidate]
    ref_runs: list[dict]
    ref_config: dict
    result: dict
    n: int
    early_ceiling: tuple | None

    def rules(self) -> list: ...

    def pick_args(self, riders: tuple = ()) -> dict: ...

    def kept_names(self, stack: list[Candidate] | None = None) -> set[str]: ...
