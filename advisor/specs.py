"""What each process advisor starts is asked to do: the options of a run (AnalyzeOptions) and the
spec a child process reads (runner/bootstrap.py; docs/internals.md §1): the baseline's
(make_spec), a trial's (trial_spec), sandboxed (sandbox), over how many processes (launch_nproc)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class AnalyzeOptions:
    warmup: int = 5
    profile_steps: int = 3
    measure_steps: int = 20
    measure_min_s: float = 0.0
    measure_max_s: float | None = None   # a window of long steps closes at this length (runner/window.py)
    timeout: float = 1800.0
    step_timeout: float = 300.0
    stall_timeout: float | None = None   # None: runner.parent.stall_limit's rule
    out: str | None = None
    # Allocator events make the profiler much slower per op; peak memory comes from the
    # child's torch.cuda.max_memory_allocated() without them.
    record_memory: bool = False
    with_stack: bool = False
    record_shapes: bool = False
    rules_dirs: list[str] = field(default_factory=list)
    run_name: str = "baseline"
    nproc_per_node: int = 1          # >1: under torch.distributed.run, every rank under advisor (runner/ranks.py)
    thresholds: object = None        # advisor.thresholds.Thresholds the rules use (None: the defaults)
    verbose: bool = False            # --verbose: every process's output on the terminal, not the baseline's alone


# Where a process after the baseline writes the script's stdout and stderr, in its own run
# directory (runner/bootstrap.py): a script that logs every step would otherwise print its
# log once per process (the repeat, every trial, the ceiling, the verification).
OUTPUT_FILE = "stdout.txt"
# The baseline's record of the paths it created (runner/created.py FILE), in the run directory.
CREATED_FILE = "created.json"


# The share of the analyze's budget one timed window may last (runner/window.py: a window of
# long steps closes there, on 5 steps at least): the baseline, its repeat and a trial must all
# fit, with their warm-up, profile and start-up.
WINDOW_SHARE = 0.15


def window_cap_s(budget_s: float) -> float:
    """A timed window's longest, for an analyze of this budget."""
    return WINDOW_SHARE * budget_s


def make_spec(script: str, script_args: list[str], run_dir: Path, opts: AnalyzeOptions,
              interventions: list | None = None, run_name: str | None = None) -> dict:
    # argv[0] is the script path exactly as the user typed it, as python would set it.
    return {
        "script": str(Path(script).absolute()),
        "argv": [script, *script_args],
        "cwd": str(Path.cwd()),
        "run_dir": str(run_dir),
        "run_name": run_name or opts.run_name,
        "warmup_steps": opts.warmup,
        "profile_steps": opts.profile_steps,
        "measure_steps": opts.measure_steps,
        "measure_min_s": opts.measure_min_s,
        "measure_max_s": opts.measure_max_s,
        "record_memory": opts.record_memory,
        "with_stack": opts.with_stack,
        "record_shapes": opts.record_shapes,
        "interventions": interventions or [],
        # a ddp fix launches its processes; else the run's own count
        "nproc_per_node": launch_nproc(interventions, opts.nproc_per_node),
        # the lines of the script's code that ran (runner/lines.py), for the patch's anchors:
        # the baseline's alone are read, so trials do not pay for them
        "record_lines": True,
        "count_flops": True,   # one warm-up step's FLOPs (runner/flops.py): the baseline's serve every run
        # the paths the baseline creates and does not read back (runner/created.py): absent for
        # every process after it, which starts from the tree the baseline found (sandbox)
        "record_created": True,
        "verbose": opts.verbose,   # read by quiet(): the processes after the baseline keep their output
    }


def trial_spec(script: str, script_args: list[str], run_dir: Path, opts: AnalyzeOptions, name: str,
               interventions: list[dict], profile: bool = True, quiet_s: float = 0.0) -> dict:
    """A trial process's spec: under <run_dir>/trials/<name>, its trace in the run's tb/, seeded,
    the script's writes redirected and its output kept in a file (sandbox), timed only when not `profile`; `quiet_s`: its
    window opens that long after it says so (processes started ahead: advisor.trials.lookahead)."""
    spec = make_spec(script, script_args, Path(run_dir) / "trials" / name, opts, interventions=interventions,
                     run_name=name)
    spec["tb_dir"] = str(Path(run_dir) / "tb")
    # the samples a trial precomputes or preloads, loaded by the next (interventions.samples_cache)
    spec["environ"] = {**compile_cache_env(run_dir), "ADVISOR_SAMPLES_CACHE": str(Path(run_dir) / "cache" / "samples")}
    sandbox(spec, run_dir)
    spec["record_lines"] = False
    spec["count_flops"] = False
    spec["seed"] = 0
    if quiet_s:
        spec["quiet_s"] = quiet_s
    if not profile:
        spec["profile_steps"] = 0
    return spec


# --cache DIR, in advisor's environment (use_cache_dir): the trials' compile book lives there
# (trials.compile_book), and nothing is written beside a compile cache that is the user's own
COMPILE_CACHE_ENV = "ADVISOR_COMPILE_CACHE"


def compile_cache_env(run_dir: Path | str) -> dict[str, str]:
    """Where the processes after the baseline keep torch.compile's caches (Inductor's FX graphs
    and AOTAutograd's, Triton's kernels): one directory they all share, <run_dir>/cache, so a
    graph one trial compiled is loaded by the next instead of compiled again. Where the
    environment names Inductor's cache (the user's own, or --cache DIR: use_cache_dir) every
    process uses that one, as the user's runs do."""
    if os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
        return {}
    root = Path(run_dir) / "cache"
    return {"TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"), "TRITON_CACHE_DIR": str(root / "triton")}


def use_cache_dir(cache: str) -> str:
    """--cache DIR: torch.compile's caches of every process of this analyze in DIR (made if
    missing), which outlives the run: a later analyze given DIR starts with the graphs compiled
    here. Set in advisor's own environment, so each process inherits it and the OS-level sandbox
    keeps DIR real (runner.sandbox.library_caches)."""
    root = Path(cache).expanduser().absolute()
    for name, sub in (("TORCHINDUCTOR_CACHE_DIR", "inductor"), ("TRITON_CACHE_DIR", "triton")):
        (root / sub).mkdir(parents=True, exist_ok=True)
        os.environ[name] = str(root / sub)
    os.environ[COMPILE_CACHE_ENV] = str(root)   # advisor's own: its compile book goes there too
    return str(root)


def sandbox(spec: dict, run_dir: Path | str) -> dict:
    """Make a spec sandboxed (docs/safety.md): the script's Python-level writes outside the run
    directory redirected into it (runner/sandbox.py), the process in a copy-on-write view of the
    filesystem where the machine allows one (runner/jail.py), no traceback printed when advisor
    stops it, and its output in a file (quiet). It starts where the baseline did: the user's
    working directory (spec ``cwd``), the script at its own path."""
    spec["sandbox_writes"] = True
    spec["sandbox_root"] = str(run_dir)
    spec["record_created"] = False
    spec["hidden_file"] = str(Path(run_dir) / CREATED_FILE)   # the baseline's record, read at start and release
    # stopped by advisor (Ctrl-C, a time limit), the script's KeyboardInterrupt is not printed
    # (runner/bootstrap.py): the process's record says why it stopped
    spec["quiet_interrupt"] = True
    return quiet(spec)


def quiet(spec: dict) -> dict:
    """The script's output of a process after the baseline goes to OUTPUT_FILE in its run
    directory (the baseline's alone reaches the terminal), unless the run is --verbose."""
    if not spec.get("verbose"):
        spec["output_file"] = OUTPUT_FILE
    return spec


def launch_nproc(interventions: list[dict], default: int = 1) -> int:
    """The processes a run of these fixes launches (Fix.processes: ddp's), else the run's own."""
    from advisor import fixes

    n = [fixes.get(i["name"]).processes(i.get("params") or {}) for i in interventions or [] if fixes.known(i.get("name"))]
    n = [k for k in n if k]
    return max(n) if n else default
