"""The wild corpus: public training scripts that advisor was never developed against, run
unmodified, as their authors' READMEs run them, under `advisor analyze` with default options.

Their code stays out of this repository. benchmarks/wild/manifest.json names, per entry, the
repository, the commit, the paths to extract, the working directory, the commands (CPU, GPU,
the authors' own fast settings) and the stand-in data (benchmarks/wild/standin.py, and the
shims in benchmarks/wild/shims/ that swap downloads for synthetic data of the same shapes).

    python3 benchmarks/wild.py fetch [NAME ...]      # extract the entries' paths from the snapshots
    python3 benchmarks/wild.py run [NAME ...] [--device cpu|gpu] [--budget S] [--fast]
    python3 benchmarks/wild.py table                 # the scoreboard as a markdown table
    python3 benchmarks/wild.py list                  # the entries and what each runs

`fetch` reads git snapshots (bare repositories) from WILD_MIRROR (default /work/.mirror, one
folder OWNER+NAME/repo per repository, as the search tool's fetch leaves them) and writes the
listed paths at the recorded commit into WILD_SRC (default benchmarks/wild/src, ignored by
git), one folder per repository (OWNER+NAME). A repository too large to snapshot is filled in
by hand at the same commit (its files at their paths under WILD_SRC/OWNER+NAME) and a file
.wild-commit holding the commit; `fetch` then keeps it. `run` copies each entry's tree into
WILD_WORK (default /tmp/wild-work/NAME), makes its stand-in data there, runs the command as
plain python for a few seconds (a script that fails even so is recorded as such, not
analyzed), then `advisor analyze --out RUN --budget MIN <command>` from the entry's working
directory, and merges the results into benchmarks/wild/scoreboard.json (--scoreboard).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
WILD = HERE / "wild"
MANIFEST = WILD / "manifest.json"
SCOREBOARD = WILD / "scoreboard.json"
SHIMS = WILD / "shims"
STUBS = SHIMS / "stubs"
sys.path.insert(0, str(WILD))

import standin  # noqa: E402  (benchmarks/wild/standin.py, beside the manifest)

ADVISOR_FAULT = {"advisor", "intervention", "sandbox"}   # failure.kind values that are advisor's
FAILED = {"failed", "error", "crashed"}


@dataclass
class Entry:
    name: str
    repo: str
    commit: str
    paths: list[str]
    cwd: str
    readme: str
    cpu: str | None
    gpu: str | None
    fast: str | None = None
    kind: str = ""
    data: list[dict] = field(default_factory=list)
    env: dict = field(default_factory=dict)
    cpu_env: dict = field(default_factory=dict)
    cpu_skip: str | None = None
    gpu_pick: bool = False
    requires: list[str] = field(default_factory=list)   # modules beyond torch and torchvision
    license: str = ""
    notes: str = ""

    @property
    def slug(self) -> str:
        return self.repo.replace("/", "+")

    def command(self, device: str) -> str | None:
        return self.cpu if device == "cpu" else self.gpu


def load_manifest(path: Path = MANIFEST) -> list[Entry]:
    doc = json.loads(path.read_text())
    return [Entry(**e) for e in doc["entries"]]


def script_argv(command: str) -> list[str]:
    """The command's script and arguments: `python3 train.py --x 1` -> [train.py, --x, 1]."""
    argv = shlex.split(command)
    if argv and Path(argv[0]).name.startswith("python"):
        argv = argv[1:]
        while argv and argv[0] in ("-u", "-B", "-O", "-W") or (argv and argv[0].startswith("-W")):
            argv = argv[2:] if argv[0] == "-W" else argv[1:]   # the interpreter's own flags (-u: unbuffered)
    if not argv or argv[0] == "-m":
        raise ValueError(f"not a `python SCRIPT args` command: {command!r}")
    return argv


def _src_root() -> Path:
    return Path(os.environ.get("WILD_SRC", HERE / "wild" / "src"))


def _work_root() -> Path:
    return Path(os.environ.get("WILD_WORK", "/tmp/wild-work"))


def _mirror(slug: str) -> Path | None:
    base = Path(os.environ.get("WILD_MIRROR", "/work/.mirror")) / slug / "repo"
    for git_dir in (base / ".git", base):
        if (git_dir / "HEAD").is_file():
            return git_dir
    return None


# -- fetch ---------------------------------------------------------------------------------

def fetch(entries: list[Entry]) -> int:
    """Each repository's listed paths, at its commit, into WILD_SRC/OWNER+NAME."""
    by_repo: dict[str, list[Entry]] = {}
    for e in entries:
        by_repo.setdefault(e.slug, []).append(e)
    bad = 0
    for slug, group in by_repo.items():
        commit = group[0].commit
        dest = _src_root() / slug
        stamp = dest / ".wild-commit"
        paths = sorted({p for e in group for p in e.paths})
        git_dir = _mirror(slug)
        if git_dir is None:
            if stamp.is_file() and stamp.read_text().strip() == commit:
                print(f"{slug}: kept (filled in by hand at {commit[:10]})")
            else:
                print(f"{slug}: no snapshot under WILD_MIRROR: fetch github:{group[0].repo} with the search tool, "
                      f"or fill in {dest} at {commit}")
                bad += 1
            continue
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        try:
            absent = _extract(git_dir, commit, paths, dest)
        except subprocess.CalledProcessError as exc:
            print(f"{slug}: git failed: {(exc.stderr or b'').decode()[-400:]}")
            bad += 1
            continue
        if absent:  # the snapshot leaves out files of 4 MiB and more: a stand-in (data, if_absent) takes their place
            print(f"{slug}: not in the snapshot: {', '.join(absent)}")
        stamp.write_text(commit + "\n")
        size = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
        print(f"{slug}: {len(paths)} paths at {commit[:10]}, {size / 2**20:.1f} MiB")
    return bad


def _extract(git_dir: Path, commit: str, paths: list[str], dest: Path) -> list[str]:
    """The files under paths at commit, written under dest; returns those the snapshot lacks."""
    git = ["git", f"--git-dir={git_dir}"]
    listing = subprocess.run([*git, "ls-tree", "-r", "-z", commit, "--", *paths], capture_output=True, check=True).stdout
    absent = []
    for item in filter(None, listing.split(b"\0")):
        meta, name = item.split(b"\t", 1)
        mode, kind, sha = meta.split()
        rel = name.decode()
        if kind != b"blob":
            continue
        got = subprocess.run([*git, "cat-file", "blob", sha.decode()], capture_output=True)
        if got.returncode != 0:
            absent.append(rel)
            continue
        out = dest / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        if mode == b"120000":
            out.symlink_to(got.stdout.decode())
        else:
            out.write_bytes(got.stdout)
            if mode == b"100755":
                out.chmod(0o755)
    if not listing:
        raise FileNotFoundError(f"none of {paths} at {commit}")
    return absent


# -- run -----------------------------------------------------------------------------------

def _env(entry: Entry, device: str, home: Path) -> dict:
    env = dict(os.environ)
    shims = [str(SHIMS)]
    if _missing("wandb"):
        shims.append(str(STUBS))  # wandb's own disabled mode where it is installed; else a stub
    env["PYTHONPATH"] = os.pathsep.join([*shims, str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    env.update({"WILD_SHIM": "1", "PYTHONUNBUFFERED": "1", "MPLBACKEND": "Agg", "WANDB_MODE": "disabled",
                "HF_HOME": str(home / "hf"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                "HF_DATASETS_OFFLINE": "1", "TORCH_HOME": str(home / "torch"), "TOKENIZERS_PARALLELISM": "false"})
    tree = str(home.parent)
    extra = {**entry.env, **(entry.cpu_env if device == "cpu" else {})}
    for k, v in extra.items():
        v = str(v).replace("{tree}", tree)
        env[k] = os.pathsep.join([v, env["PYTHONPATH"]]) if k == "PYTHONPATH" else v
    return env


def _missing(module: str) -> bool:
    import importlib.util
    return importlib.util.find_spec(module) is None


def prepare(entry: Entry, device: str) -> tuple[Path, Path]:
    """The entry's working copy (its repository's extracted tree) with its stand-in data made;
    returns (tree, working directory)."""
    src = _src_root() / entry.slug
    if not (src / ".wild-commit").is_file():
        raise FileNotFoundError(f"{src}: not extracted (python3 benchmarks/wild.py fetch {entry.name})")
    tree = _work_root() / entry.name
    if tree.exists():
        shutil.rmtree(tree)
    shutil.copytree(src, tree, symlinks=True)
    cwd = tree / entry.cwd
    cwd.mkdir(parents=True, exist_ok=True)
    home = tree / ".wild-home"
    old = os.environ.copy()
    os.environ.update({k: v for k, v in _env(entry, device, home).items() if k.startswith(("HF_", "TORCH_HOME", "WILD_"))})
    try:
        standin.make(cwd, entry.data, device, home / "hf")
    finally:
        os.environ.clear()
        os.environ.update(old)
    return tree, cwd


def _run(argv: list[str], cwd: Path, env: dict, timeout: float, log: Path, stop: int = signal.SIGINT,
         grace: float = 30) -> tuple[int | None, float]:
    """argv in cwd, its output to log; at timeout its process group gets `stop`, then SIGKILL
    after `grace` seconds. Returns (exit status, None when it was stopped; seconds)."""
    start = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except BaseException as exc:   # stopped itself (SIGTERM, ^C): its own session must not outlive it
            if not isinstance(exc, subprocess.TimeoutExpired):
                # SIGTERM first: advisor stops the processes it started in sessions of their own
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    pass
                raise
            os.killpg(proc.pid, stop)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            rc = None
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)   # what the script left running (its workers) after it ended
            except ProcessLookupError:
                pass
    return rc, round(time.monotonic() - start, 1)


def _tail(log: Path, n: int = 1500) -> str:
    try:
        return log.read_text(errors="replace")[-n:]
    except OSError:
        return ""


def plain_python(entry: Entry, command: str, cwd: Path, env: dict, timeout: float, logs: Path) -> dict:
    """The command as plain python for at most `timeout` seconds: ok when it is still running
    then or it ended with status 0."""
    log = logs / f"{entry.name}-plain.log"
    rc, took = _run([sys.executable, *script_argv(command)], cwd, env, timeout, log, signal.SIGTERM, 5)
    return {"ok": rc in (0, None), "exit": rc, "s": took, "tail": "" if rc in (0, None) else _tail(log)}


def analyze(entry: Entry, command: str, cwd: Path, env: dict, run_dir: Path, budget_s: float, nice: int,
            logs: Path, extra: list[str] | None = None, suffix: str = "") -> dict:
    """`advisor analyze --out RUN --budget MIN <command>`; stopped at three times the budget
    plus 5 minutes (the verification and a margin)."""
    if run_dir.exists():
        shutil.rmtree(run_dir)
    argv = [sys.executable, "-m", "advisor", "analyze", "--out", str(run_dir),
            "--budget", f"{budget_s / 60:g}", *(extra or []), *script_argv(command)]
    if nice:
        argv = ["nice", "-n", str(nice), *argv]
    log = logs / f"{entry.name}{suffix}.log"
    rc, took = _run(argv, cwd, env, 3 * budget_s + 300, log)
    return {"exit": rc, "wall_s": took, "log": str(log), "tail": _tail(log, 3000) if rc != 0 else ""}


def _restore(tree: Path, clean: Path) -> None:
    shutil.rmtree(tree)
    shutil.copytree(clean, tree, symlinks=True)


def run_entry(entry: Entry, device: str, budget_s: float, plain_s: float, nice: int, runs: Path,
              fast: bool, plain_only: bool = False) -> dict:
    command = entry.command(device)
    base = {"name": entry.name, "repo": entry.repo, "commit": entry.commit, "kind": entry.kind,
            "command": command, "cwd": entry.cwd, "device": device, "budget_s": budget_s,
            "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds")}
    if command is None:
        return {**base, "completed": False, "skipped": entry.cpu_skip or f"no {device} command"}
    missing = [m for m in entry.requires if _missing(m)]
    if missing:
        return {**base, "completed": False, "skipped": f"needs {', '.join(missing)} (not installed)"}
    logs = runs / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    try:
        tree, cwd = prepare(entry, device)
    except Exception as exc:  # a stand-in that cannot be made is the corpus's fault: said, not raised
        return {**base, "completed": False, "skipped": f"stand-in data: {type(exc).__name__}: {exc}"}
    env = _env(entry, device, tree / ".wild-home")
    clean = tree.with_name(tree.name + ".clean")
    if clean.exists():
        shutil.rmtree(clean)
    shutil.copytree(tree, clean, symlinks=True)
    plain = plain_python(entry, command, cwd, env, plain_s, logs)
    _restore(tree, clean)
    out = {**base, "plain": plain}
    if not plain["ok"]:
        return {**out, "completed": False, "skipped": "fails as plain python"}
    if plain_only:
        return out
    run_dir = runs / f"{entry.name}-{device}"
    result = analyze(entry, command, cwd, env, run_dir, budget_s, nice, logs)
    out.update(read_run(run_dir))
    out.update({"analyze_exit": result["exit"], "wall_s": result["wall_s"], "run_dir": str(run_dir),
                "completed": out.get("completed", False) and result["exit"] == 0})
    if result["tail"]:
        out["analyze_tail"] = result["tail"]
    if fast and entry.fast:
        _restore(tree, clean)
        fast_dir = runs / f"{entry.name}-{device}-fast"
        r = analyze(entry, entry.fast, cwd, env, fast_dir, 60, nice, logs, ["--no-trials", "--no-verify"], "-fast")
        doc = _load(fast_dir)
        out["fast"] = {"command": entry.fast, "exit": r["exit"], "wall_s": r["wall_s"],
                       "samples_per_s": ((doc or {}).get("measurement") or {}).get("samples_per_s")}
    shutil.rmtree(clean, ignore_errors=True)
    return out


# -- reading run.json ----------------------------------------------------------------------

def _load(run_dir: Path) -> dict | None:
    try:
        return json.loads((run_dir / "run.json").read_text())
    except (OSError, ValueError):
        return None


def _fault(trial: dict) -> str | None:
    """Who a failed trial's failure belongs to, as run.json says (failure.kind), else None."""
    failure = trial.get("failure")
    if isinstance(failure, dict):
        return failure.get("kind")
    return failure if isinstance(failure, str) else None


def read_run(run_dir: Path) -> dict:
    """The scoreboard's fields from one analyze's run.json."""
    doc = _load(run_dir)
    if doc is None:
        return {"completed": False, "run_json": False}
    trials = doc.get("trials") or []
    repeat = next((t for t in trials if t.get("name") == "00-baseline-repeat"), None)
    tried = [t for t in trials if t.get("fix") != "baseline (repeat)" and t.get("status") != "not run"
             and not str(t.get("name")).startswith("ceiling")]   # the data-free ceiling is a measurement, not a fix
    failed = [t for t in tried if t.get("status") in FAILED]
    kept = [t["name"] for t in trials if t.get("status") == "accepted" and not t.get("apart")]
    patch = doc.get("patch") or {}
    verification = patch.get("verification") or {}
    summary = doc.get("trial_summary") or {}
    # The repeat runs the baseline's own configuration: where it fails and the baseline did not,
    # the difference is advisor's (its sandbox, its start) whatever failure.kind says, and so is
    # every trial that fails the same way.
    repeat_failed = (repeat or {}).get("status") in FAILED
    same = _message(repeat) if repeat_failed else None
    suspect = [t for t in failed if _fault(t) not in ADVISOR_FAULT and same is not None and _message(t) == same]
    argv = (doc.get("command") or {}).get("argv") or []
    command = patch.get("command")
    return {
        "completed": doc.get("status") == "complete",
        "status": doc.get("status"),
        "incomplete_reasons": doc.get("incomplete_reasons") or [],
        "trials": len(tried),
        "failed_trials": len(failed),
        "advisor_failures": sum(_fault(t) in ADVISOR_FAULT for t in failed),
        "unclassified_failures": sum(_fault(t) is None for t in failed),
        "repeat_failed": repeat_failed,
        "suspect_advisor_failures": len(suspect) + (repeat_failed and _fault(repeat) not in ADVISOR_FAULT),
        "failures": [{"trial": t.get("name"), "kind": _fault(t), "reason": str(t.get("reason"))[:300]} for t in failed],
        "kept": kept,
        "patch_status": verification.get("status") or ("none" if not patch.get("file") else "unverified"),
        "command_changed": bool(command) and list(command[1:]) != list(argv),
        "recommended": shlex.join(command) if command else None,
        "baseline_samples_per_s": (doc.get("measurement") or {}).get("samples_per_s"),
        "stack_samples_per_s": verification.get("stack_samples_per_s"),
        "verified_samples_per_s": verification.get("samples_per_s"),
        "repeat_one_off_s": (repeat or {}).get("one_off_s"),
        "repeat_status": (repeat or {}).get("status"),
        "lead_in_noise_s": _lead_in_noise(summary),
        "repeat_within_noise": (summary.get("lead_in") or {}).get("repeat_within_noise"),
        "analyze_wall_s": summary.get("wall_s") or summary.get("analyze_wall_s"),
        "trials_wall_s": summary.get("expected_s"),
        "verify_wall_s": verification.get("wall_s"),
    }


def _message(trial: dict | None) -> str | None:
    failure = (trial or {}).get("failure")
    return f"{failure.get('exception')}: {failure.get('message')}" if isinstance(failure, dict) else None


def _lead_in_noise(summary: dict):
    for key in ("lead_in_noise_s", "one_off_noise_s"):
        if summary.get(key) is not None:
            return summary[key]
    lead = summary.get("lead_in")
    return lead.get("noise_s") if isinstance(lead, dict) else None


# -- the scoreboard ------------------------------------------------------------------------

def merge(scoreboard: Path, rows: list[dict]) -> dict:
    """rows into the scoreboard, one per (name, device): the newest replaces the older."""
    try:
        doc = json.loads(scoreboard.read_text())
    except (OSError, ValueError):
        doc = {"scripts": []}
    keep = {(r["name"], r["device"]): r for r in doc.get("scripts", [])}
    for r in rows:
        keep[(r["name"], r["device"])] = r
    doc = {"date": _dt.date.today().isoformat(), "scripts": sorted(keep.values(), key=lambda r: (r["device"], r["name"]))}
    scoreboard.parent.mkdir(parents=True, exist_ok=True)
    scoreboard.write_text(json.dumps(doc, indent=1) + "\n")
    return doc


def _rate(x) -> str:
    return f"{x:,.0f}" if isinstance(x, (int, float)) and x else "–"


def _num(x, fmt="{:+.1f}") -> str:
    return fmt.format(x) if isinstance(x, (int, float)) else "–"


def within_budget(r: dict) -> bool | None:
    """The whole analyze ended within its budget plus its verification (None: not analyzed)."""
    wall, budget = r.get("analyze_wall_s") or r.get("wall_s"), r.get("budget_s")
    if not isinstance(wall, (int, float)) or not isinstance(budget, (int, float)):
        return None
    return wall <= budget + (r.get("verify_wall_s") or 0) + 15   # 15 s: the start and the report


def summary(doc: dict) -> str:
    rows = doc["scripts"]
    ran = [r for r in rows if not r.get("skipped")]
    over = [r["name"] for r in ran if within_budget(r) is False]
    failed = sum(r.get("failed_trials") or 0 for r in ran)
    theirs = sum(r.get("advisor_failures") or 0 for r in ran)
    unknown = sum(r.get("unclassified_failures") or 0 for r in ran)
    suspect = [r["name"] for r in ran if r.get("suspect_advisor_failures")]
    done = sum(bool(r.get("completed")) for r in ran)
    return (f"{len(rows)} rows ({len({r['repo'] for r in rows})} repositories): {done} analyzes completed of {len(ran)} run; "
            f"{len(rows) - len(ran)} not analyzed; failed trials {failed}, of them advisor's {theirs}, unclassified {unknown}; "
            f"the repeat of the baseline failed (advisor's, whatever the kind says) in: {', '.join(suspect) or 'none'}; "
            f"over budget + verification: {', '.join(over) or 'none'}")


def table(doc: dict) -> str:
    lines = ["| script | repo @ commit | device | completed | trials (failed, advisor's) | kept | patch | command changed "
             "| baseline | verified | authors' fast | repeat one-off s (lead-in noise) | wall / budget s |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in doc["scripts"]:
        if r.get("skipped"):
            why = r["skipped"]
            if r.get("plain", {}).get("tail"):
                why += ": " + r["plain"]["tail"].strip().splitlines()[-1][:120]
            lines.append(f"| {r['name']} | {r['repo']} @ {r['commit'][:7]} | {r['device']} | no: {why.replace('|', '/')} "
                         "| – | – | – | – | – | – | – | – | – |")
            continue
        fast = (r.get("fast") or {}).get("samples_per_s")
        lines.append(
            f"| {r['name']} | {r['repo']} @ {r['commit'][:7]} | {r['device']} | {'yes' if r.get('completed') else 'no'} "
            f"| {r.get('trials', '–')} ({r.get('failed_trials', '–')}, {r.get('advisor_failures', '–')}) "
            f"| {', '.join(r.get('kept') or []) or '–'} | {r.get('patch_status', '–')} "
            f"| {'yes' if r.get('command_changed') else 'no'} | {_rate(r.get('baseline_samples_per_s'))} "
            f"| {_rate(r.get('verified_samples_per_s'))} | {_rate(fast)} | {_num(r.get('repeat_one_off_s'))} "
            f"({_num(r.get('lead_in_noise_s'), '{:.1f}')}) "
            f"| {_num(r.get('wall_s'), '{:.0f}')} / {_num(r.get('budget_s'), '{:.0f}')} |")
    return "\n".join([*lines, "", summary(doc)])


def _select(entries: list[Entry], names: list[str], device: str, picks: bool) -> list[Entry]:
    if names:
        known = {e.name: e for e in entries}
        missing = [n for n in names if n not in known]
        if missing:
            raise SystemExit(f"unknown entries: {', '.join(missing)}")
        return [known[n] for n in names]
    if picks:
        return [e for e in entries if e.gpu_pick]
    return entries


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="verb", required=True)
    f = sub.add_parser("fetch")
    f.add_argument("names", nargs="*")
    r = sub.add_parser("run")
    r.add_argument("names", nargs="*")
    r.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    r.add_argument("--budget", type=float, default=240.0, help="seconds for each analyze (advisor's default: 240)")
    r.add_argument("--plain-timeout", type=float, default=40.0, help="seconds of the plain-python check")
    r.add_argument("--nice", type=int, default=None, help="niceness of the analyze (default 15 on cpu, 0 on gpu)")
    r.add_argument("--fast", action="store_true", help="also time the authors' own fast settings (--no-trials)")
    r.add_argument("--plain-only", action="store_true", help="only the plain-python check (nothing is written to the scoreboard)")
    r.add_argument("--picks", action="store_true", help="the entries marked gpu_pick (when no names are given)")
    r.add_argument("--runs", type=Path, default=Path(os.environ.get("WILD_RUNS", "/tmp/wild-runs")))
    r.add_argument("--scoreboard", type=Path, default=SCOREBOARD)
    m = sub.add_parser("merge", help="merge scoreboards (the slots of benchmarks/wild.sh) into --scoreboard")
    m.add_argument("boards", nargs="+", type=Path)
    m.add_argument("--scoreboard", type=Path, default=SCOREBOARD)
    rs = sub.add_parser("rescore", help="read every row's run.json again (after a change to what is read)")
    rs.add_argument("--scoreboard", type=Path, default=SCOREBOARD)
    t = sub.add_parser("table")
    t.add_argument("--scoreboard", type=Path, default=SCOREBOARD)
    t.add_argument("--device", choices=("cpu", "gpu"), help="only this device's rows")
    sub.add_parser("list")
    args = p.parse_args(argv)
    entries = load_manifest()
    if args.verb == "fetch":
        return 1 if fetch(_select(entries, args.names, "cpu", False)) else 0
    if args.verb == "list":
        for e in entries:
            print(f"{e.name:28} {e.repo:40} {e.kind:14} cpu: {e.cpu or '– (' + str(e.cpu_skip) + ')'}")
        return 0
    if args.verb == "merge":
        rows = [r for b in args.boards if b.is_file() for r in json.loads(b.read_text())["scripts"]]
        merge(args.scoreboard, rows)
        return 0
    if args.verb == "rescore":
        doc = json.loads(args.scoreboard.read_text())
        rows = [{**r, **read_run(Path(r["run_dir"])), "completed": read_run(Path(r["run_dir"]))["completed"] and r.get("analyze_exit") == 0}
                if r.get("run_dir") and _load(Path(r["run_dir"])) else r for r in doc["scripts"]]
        merge(args.scoreboard, rows)
        return 0
    if args.verb == "table":
        doc = json.loads(args.scoreboard.read_text())
        doc["scripts"] = [r for r in doc["scripts"] if args.device in (None, r["device"])]
        print(table(doc))
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))   # through _run's clean-up
    nice = args.nice if args.nice is not None else (15 if args.device == "cpu" else 0)
    for e in _select(entries, args.names, args.device, args.picks):
        start = time.monotonic()
        row = run_entry(e, args.device, args.budget, args.plain_timeout, nice, args.runs, args.fast, args.plain_only)
        if args.plain_only:
            print(f"{e.name}: plain python {row.get('plain') or row.get('skipped')}", flush=True)
            continue
        merge(args.scoreboard, [row])
        print(f"{e.name}: {'completed' if row.get('completed') else 'NOT completed'}"
              f"{' (' + row['skipped'] + ')' if row.get('skipped') else ''}; trials {row.get('trials')}, "
              f"failed {row.get('failed_trials')}, kept {row.get('kept')}, patch {row.get('patch_status')}, "
              f"{time.monotonic() - start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
