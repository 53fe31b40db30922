"""Command line: `advisor analyze|inspect|report|compare|rules|rule`.

Exit codes: 0 done, 1 the run or input was incomplete/bad (what was captured is kept),
2 usage error, 3 `compare --fail-below`: the new run is slower than the gate allows.
"""

from __future__ import annotations

import argparse
import math
import sys

from advisor.commands import fail as _fail

# Counts and times on the command line: argparse rejects any other value with one line and exit 2.
MAX_COUNT = 10 ** 9     # steps, trials, processes
MAX_FLOAT = 1e7         # seconds (115 days) or minutes: beyond, a wait overflows the platform's time_t


def _whole(text: str, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be {'at least 1' if least else '0 or more'}, not {text}")
    if value > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_COUNT:,}, not {text}")
    return value


def _real(text: str, positive: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, not {text}")
    if value < 0 or (positive and value == 0):
        raise argparse.ArgumentTypeError(f"must be {'more than 0' if positive else '0 or more'}, not {text}")
    if value > MAX_FLOAT:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_FLOAT:,.0f}, not {text}")
    return value


def positive_int(text: str) -> int:
    """A count of at least 1."""
    return _whole(text, 1)


def nonneg_int(text: str) -> int:
    """A count where 0 means none (or off)."""
    return _whole(text, 0)


def positive_float(text: str) -> float:
    """Seconds or minutes, more than 0."""
    return _real(text, positive=True)


def nonneg_float(text: str) -> float:
    """Seconds, 0 allowed."""
    return _real(text, positive=False)


def _add_rule_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--threshold", action="append", default=[], metavar="NAME=VALUE",
                   help="override a rule threshold (see advisor/thresholds.py)")
    p.add_argument("--rules", action="append", default=[], metavar="DIR", help="extra rule directory")


def _add_analyze_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", help="run directory to create (default: reports/<time>-<script>)")
    p.add_argument("--warmup", type=nonneg_int, default=5,
                   help="steps run before anything is timed (default 5; 0: none)")
    p.add_argument("--profile-steps", type=positive_int, default=3,
                   help="steps profiled, after the timed ones (default 3)")
    p.add_argument("--steps", type=positive_int, default=20, help="steps timed without the profiler (default 20)")
    p.add_argument("--min-time", type=nonneg_float, default=1.0,
                   help="time at least this many seconds, up to 10x --steps (default 1.0; 0: --steps alone)")
    p.add_argument("--timeout", type=positive_float, default=1800.0,
                   help="seconds before the script is stopped (default 1800)")
    p.add_argument("--step-timeout", type=positive_float, default=300.0,
                   help="seconds allowed to reach the first training step (default 300)")
    p.add_argument("--stall-timeout", type=positive_float, default=None, metavar="S",
                   help="seconds without a training step, once stepping, before the script is stopped as "
                        "stalled, with every thread's stack (default: 50 median steps, 120-900 s)")
    p.add_argument("--memory", action="store_true",
                   help="record allocator events in the trace (memory timeline; adds profiler overhead)")
    p.add_argument("--with-stack", action="store_true", help="record Python stacks in the trace (larger)")
    p.add_argument("--shapes", action="store_true", help="record operator input shapes in the trace")
    p.add_argument("--nproc-per-node", type=positive_int, default=1, metavar="N",
                   help="run the script under torch.distributed.run with N processes, as torchrun --nproc-per-node N "
                        "would; every rank under advisor, one report (default 1)")
    p.add_argument("--no-trials", action="store_true", help="diagnose only; do not trial fixes")
    p.add_argument("--fix", help="trial only these fixes (comma-separated)")
    p.add_argument("--apply", metavar="FIX[:KEY=VALUE...],...",
                   help="run the baseline (and every trial) with these fixes applied, "
                        "e.g. amp,channels-last,dataloader-workers:num_workers=8")
    p.add_argument("--budget", type=positive_float, default=None, metavar="MIN",
                   help="minutes for the whole analyze: no trial starts that would not end inside them, the "
                        "patch's verification still to come (default 4; with trials side by side, 3 on 2-3 GPUs and 2 on "
                        "4 or more; the ladder stops sooner when the fixes left cannot be accepted)")
    p.add_argument("--max-trials", type=positive_int, default=16, help="most trials to run (default 16)")
    p.add_argument("--trial-timeout", type=positive_float, default=900.0,
                   help="seconds before a trial is stopped (default 900)")
    p.add_argument("--run-steps", type=positive_int, default=None, metavar="N",
                   help="the length of the run you will do, in training steps: a fix whose one-off cost "
                        "(a compile, a preload) is not paid back within it is left out of fixes.patch "
                        "(default: the script's own length when it ends under advisor, else unknown)")
    p.add_argument("--allow", default="", metavar="WHAT[,WHAT]",
                   help="let fixes override these choices of your script: 'nondeterministic' (cudnn.benchmark "
                        "where the script asks for deterministic convolutions), 'precision' (tf32 where it turns "
                        "TF32 off, amp on a float64 model); without it such fixes are measured apart and left "
                        "out of fixes.patch")
    p.add_argument("--no-verify", action="store_true",
                   help="do not run the patched script as plain python to check fixes.patch")
    p.add_argument("--lookahead", type=nonneg_int, default=None, metavar="N",
                   help="trial processes started ahead on a guess of the next trial, each waiting at the "
                        "script's first CUDA use (default: 5 with 16+ cores, 3 with 12+, 2 with 8+, 1 with 4+, 0 below; "
                        "0 turns it off)")
    p.add_argument("--gpus", metavar="I[,I...]", default=None,
                   help="the visible GPUs the trials may use, by position (0 is the baseline's): a single-GPU "
                        "script's trial processes then run side by side, one GPU each (default: every idle GPU)")
    p.add_argument("--trial-gpus", type=positive_int, default=None, metavar="N",
                   help="run trials on at most N GPUs at once (1: one after another on the first)")
    p.add_argument("--cache", metavar="DIR", default=None,
                   help="keep torch.compile's caches (Inductor, Triton) of the trial processes in DIR, made if "
                        "missing: a later analyze given the same DIR loads the graphs compiled here instead of "
                        "compiling them again (default: shared by this run's processes, in its run directory)")
    p.add_argument("--verbose", action="store_true",
                   help="show the script's output of every process (the repeat, each trial, the verification) "
                        "on the terminal; by default the baseline's alone, the others' in their directory's stdout.txt")
    _add_rule_options(p)
    p.add_argument("--json", action="store_true",
                   help="print machine-readable results on stdout (the script's own output goes to stderr)")




def _version() -> str:
    """`advisor X.Y.Z`, with torch's version read from its installed metadata (torch is not imported)."""
    from importlib import metadata

    import advisor

    text = f"advisor {advisor.__version__}"
    try:
        text += f" (torch {metadata.version('torch')})"
    except metadata.PackageNotFoundError:
        pass
    return text


class _VersionAction(argparse.Action):
    """--version, with the text built only when asked for."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(_version())
        parser.exit()


def _fraction(text: str) -> float:
    """--fail-below: a fraction of the base run's throughput, in (0, 10]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value <= 0 or value > 10:
        raise argparse.ArgumentTypeError(f"{text} is not a fraction in (0, 10] (e.g. 0.95: fail below 0.95 x BASE)")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="advisor", description="Profiling-driven performance advisor for PyTorch training.")
    parser.add_argument("--version", action=_VersionAction, help="print advisor's version (and torch's) and exit")
    sub = parser.add_subparsers(dest="command", required=True)
    a = sub.add_parser("analyze", help="run a training script under the profiler and report where time goes",
                       usage="advisor analyze [options] SCRIPT [script args...]")
    _add_analyze_options(a)
    a.add_argument("script", help="the training script, run as `python SCRIPT args...` would")
    a.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments passed to the script untouched")
    i = sub.add_parser("inspect", help="analyze existing traces without running anything")
    i.add_argument("traces", nargs="+", help="trace file (.json/.json.gz), run directory or TensorBoard log dir")
    _add_rule_options(i)
    i.add_argument("--json", action="store_true", help="print machine-readable results on stdout")
    r = sub.add_parser("report", help="re-render a run's index.html from its run.json (nothing is re-run)")
    r.add_argument("run", help="run directory (or its run.json)")
    c = sub.add_parser("compare", help="render two runs side by side (e.g. before and after fixes.patch), "
                                       "or gate a run's throughput against a base run (--fail-below)",
                       description="Compare two runs: side by side on the terminal (the default), the HTML page "
                                   "(--out), a throughput gate for CI (--fail-below), machine-readable numbers "
                                   "(--json). Exit codes: 0 done (gate "
                                   "passed), 1 a run is missing, incomplete or unmeasured, 2 usage error, "
                                   "3 the gate failed.")
    c.add_argument("run_a", metavar="BASE", help="run directory (or its run.json): the reference")
    c.add_argument("run_b", metavar="NEW", help="run directory (or its run.json): compared with the reference")
    c.add_argument("--out", help="HTML file to write (without --out, --fail-below or --json: the comparison "
                                 "is printed on the terminal)")
    c.add_argument("--names", help="labels of the two runs, comma-separated (default: the directory names)")
    c.add_argument("--fail-below", type=_fraction, metavar="FRACTION",
                   help="exit 3 when NEW's samples/s fall below FRACTION x BASE's (e.g. 0.95); steps/s "
                        "for both when either run has no samples/s (batch size unknown)")
    c.add_argument("--json", action="store_true",
                   help="print both runs' throughput, their ratio and the gate's verdict as JSON on stdout")
    sub.add_parser("rules", help="list the rule catalogue")
    rc = sub.add_parser("rule", help="print one rule's documentation")
    rc.add_argument("code")
    return parser


def split_analyze_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """Split `analyze` argv into advisor's options and the script's argv.

    Everything from the first positional on belongs to the script — even `--help`.
    """
    p = argparse.ArgumentParser(add_help=False)
    _add_analyze_options(p)
    takes_value = {s for a in p._actions for s in a.option_strings if a.nargs != 0}
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok == "--":
            return argv[:i], argv[i + 1:]
        if not tok.startswith("-") or tok == "-":
            return argv[:i], argv[i:]
        i += 2 if (tok in takes_value and "=" not in tok) else 1
    return argv, []


def _thresholds(ns: argparse.Namespace) -> str | None:
    """ADVISOR_THRESHOLDS and --threshold NAME=VALUE, checked now: ns.thresholds, which every
    rule run is given (the trials' too); a one-line error when one is unknown."""
    from advisor.thresholds import Thresholds

    try:
        ns.thresholds = Thresholds.from_environment(getattr(ns, "threshold", None) or [])
    except ValueError as exc:
        return str(exc)
    return None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "analyze":
        own, script_argv = split_analyze_argv(argv[1:])
        if not script_argv:
            _parser().parse_args(["analyze", *own])  # prints usage / help and exits
            return _fail("analyze needs a script: advisor analyze [options] SCRIPT [args...]", 2)
        ns = _parser().parse_args(["analyze", *own, script_argv[0]])
        bad = _thresholds(ns)
        from advisor.commands.analyze import cmd_analyze

        return _fail(bad, 2) if bad else cmd_analyze(ns, script_argv[0], script_argv[1:])
    ns = _parser().parse_args(argv)
    bad = _thresholds(ns)
    if bad:
        return _fail(bad, 2)
    from advisor.commands import compare, inspect

    cmd = {"inspect": inspect.cmd_inspect, "report": inspect.cmd_report, "compare": compare.cmd_compare,
           "rules": inspect.cmd_rules, "rule": inspect.cmd_rule}[ns.command]
    if ns.command not in ("inspect", "report"):
        return cmd(ns)
    try:
        return cmd(ns)
    except Exception as exc:  # noqa: BLE001 - last resort: the readers answer bad input themselves (issue 27)
        text = (str(exc).splitlines() or [""])[0]
        return _fail(f"internal error: {type(exc).__name__}: {text} (please report)")

