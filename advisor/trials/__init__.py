"""The trials ladder: re-run the unmodified script with each proposed fix applied at run time,
keep what is faster beyond noise with healthy loss, stack the winners.

Modules, in the order a ladder uses them:

- ``candidates``: a finding's fix → the concrete trials that test it (worker counts, fallbacks).
- ``rungs``: which candidate runs next, and with what (bundles, pairs, riders on compile).
- ``ladder``: the ladder itself (``run_trials``): the queue, the verdicts, the stack,
  re-profiling after each kept fix.
- ``reference``: the baseline timed again (the repeat) and the noise the first trials are judged at.
- ``early`` and ``stopping``: when nothing left can be accepted (the rules' estimates, the
  data-free ceiling run early), the ladder stops.
- ``process``: one trial process (``TrialContext``, ``TrialRunner``: how a trial runs, a fake one in
  tests; its spec, the child, a short script's split).
- ``state``: what the measurements after the ladder and the guesses are given (typed).
- ``verdicts``: how one comparison is judged against the noise; when a reference is timed again.
- ``apart``: fixes that change training dynamics (batch size), measured on top of the final stack.
- ``ceiling``: the data-free ceiling, the kept compute fixes with one cached batch on the device.
- ``guesses`` and ``lookahead``: the processes likely to come next, started ahead while one runs.
- ``prep``: what gets ready for the trials while the baseline runs.
"""

from advisor.trials.ladder import run_trials
from advisor.trials.process import TrialContext, TrialRunner, default_budget_s, planned_end
from advisor.trials.state import REPEAT

__all__ = ["REPEAT", "TrialContext", "TrialRunner", "default_budget_s", "planned_end", "run_trials"]
