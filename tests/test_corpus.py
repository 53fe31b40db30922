"""Every corpus layout (benchmarks/corpus/*): advisor writes the patch for forced fixes, applies
it to a copy of the script's tree, runs the patched script as plain python, and each edit must
take effect there; the script's own flags must still be obeyed.

Each entry's directory names its script (script.txt), small CPU arguments (cpu_args.txt), the
fixes that a CPU run can apply and show (cpu_fixes.txt, ``--apply`` syntax) and, where advisor
can read it, the run's length those arguments give (cpu_run_steps.txt). Where the CPU
arguments pass the flag a fix's value comes from (``-j 0``), the patch must change that flag
on the command line, and the verification, run with the changed flag, proves the script
still reads it.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "benchmarks" / "corpus"
ENTRIES = sorted(p.name for p in CORPUS.iterdir() if (p / "script.txt").is_file() and (p / "cpu_fixes.txt").is_file())
FRAMEWORK = {"hf_trainer": "transformers", "lightning_module": "lightning"}


def _read(entry: str, name: str) -> str:
    return (CORPUS / entry / name).read_text().strip()


def _digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def test_the_corpus_has_eight_layouts():
    assert len(ENTRIES) >= 8, ENTRIES
    for entry in ENTRIES:
        notes = _read(entry, "NOTES.md")
        assert any(lic in notes for lic in ("MIT", "BSD", "Apache", "Licence:")), f"{entry}: NOTES.md names no licence"


@pytest.mark.parametrize("entry", ENTRIES)
def test_forced_fixes_are_patched_and_take_effect_as_plain_python(entry, tmp_path):
    if entry in FRAMEWORK:
        pytest.importorskip(FRAMEWORK[entry])
    src = tmp_path / "project"
    shutil.copytree(CORPUS / entry, src, ignore=shutil.ignore_patterns("__pycache__"))
    before = _digest(src)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    out = tmp_path / "run"
    fixes = _read(entry, "cpu_fixes.txt")
    cmd = [sys.executable, "-m", "advisor", "analyze", "--no-trials", "--apply", fixes, "--warmup", "3",
           "--steps", "6", "--min-time", "0", "--profile-steps", "1", "--out", str(out),
           str(src / _read(entry, "script.txt")), *shlex.split(_read(entry, "cpu_args.txt"))]
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    doc = json.loads((out / "run.json").read_text())
    patch = doc["patch"]
    wanted = [f.split(":")[0] for f in fixes.split(",")]
    notes = {n["intervention"]: n for n in patch["notes"]}
    for name in wanted:
        assert notes[name]["applied"], (name, notes[name])
    v = patch["verification"]
    assert v["runs"] >= 1 and v.get("samples_per_s"), v
    taken = {c["fix"]: c["took_effect"] for c in v["checks"]}
    assert all(taken[name] is not False for name in wanted), v["checks"]
    assert sum(taken[name] is True for name in wanted) >= max(1, len(wanted) - 1), v["checks"]
    # the flag a value comes from still works: the verification ran with the changed flag
    for n in patch["notes"]:
        for ch in n.get("argv_changes") or []:
            if not ch["flag"].startswith("-"):      # a Hydra override word
                assert f"{ch['flag']}={ch['to']}" in v["argv"], (ch, v["argv"])
                continue
            assert ch["flag"] in v["argv"], (ch, v["argv"])
            if ch["to"] is not None:     # None: a bare switch (--amp) the command adds
                assert v["argv"][v["argv"].index(ch["flag"]) + 1] == str(ch["to"]), (ch, v["argv"])
    # every patched file still compiles, and the user's files were never written
    tree = out / v["tree"]
    for rel in (r for r in _patched(out / "fixes.patch") if r.endswith(".py")):
        compile((tree / rel).read_text(), rel, "exec")
    assert _digest(src) == before
    # the run's length, where the entry says what it is (cpu_run_steps.txt: the steps its CPU
    # arguments train for, and a word of where advisor reads them)
    if (CORPUS / entry / "cpu_run_steps.txt").is_file():
        steps, source = _read(entry, "cpu_run_steps.txt").split(maxsplit=1)
        assert doc["run_length"]["steps"] == int(steps) and source in doc["run_length"]["source"], doc["run_length"]


def _patched(patch: Path) -> list[str]:
    return [ln[6:].strip() for ln in patch.read_text().splitlines() if ln.startswith("+++ b/")] if patch.exists() else []


def test_corpus_table_reads_run_directories(tmp_path):
    """benchmarks/corpus_table.py: one row per analyzed entry, its upstream-fast run beside it."""
    for name, rate, fast in (("a", 100.0, 150.0), ("b", 10.0, None)):
        d = tmp_path / name
        d.mkdir()
        doc = {"measurement": {"samples_per_s": rate}, "trial_summary": {"analyze_wall_s": 90},
               "trials": [{"name": "01-amp", "status": "accepted", "one_off_s": 1.25, "break_even_steps": 40}],
               "patch": {"command": ["python", "train.py", "--workers", "8"],
                         "end_to_end": {"steps": 100, "source": "--run-steps", "baseline_s": 12.0, "patched_s": 8.0},
                         "verification": {"samples_per_s": rate * 2, "stack_samples_per_s": rate * 2.1,
                                          "of_stack": 2 / 2.1, "status": "verified", "checks": []}}}
        (d / "run.json").write_text(json.dumps(doc))
        if fast:
            (tmp_path / f"{name}-fast").mkdir()
            (tmp_path / f"{name}-fast" / "run.json").write_text(json.dumps({"measurement": {"samples_per_s": fast}}))
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "corpus_table.py"), str(tmp_path)],
                          capture_output=True, text=True, check=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("| a ") or ln.startswith("| b ")]
    assert lines[0] == ("| a | 100 | 210 | 200 | 95% | verified | 150 | 90 s | 01-amp (+1.2 s, even 40 steps) "
                        "| 12.0 → 8.0 s (100 steps) | `python train.py --workers 8` |")
    assert lines[1].startswith("| b | 10 | 21 | 20 | 95% | verified | – |")


def test_transformers_table_reads_tokens_a_second(tmp_path):
    """benchmarks/transformers_table.py: per workload, real tokens a second of the baseline, of the
    last kept trial and of the verified patch, the rules that fired and the fixes measured apart."""
    doc = {"measurement": {"tokens_per_s": 1000.0}, "environment": {"gpu_name": "NVIDIA H200"},
           "findings": [{"code": "ADV122"}, {"code": "ADV101"}],
           "trials": [{"name": "01-amp", "status": "accepted", "tokens_per_s": 2000.0},
                      {"name": "02-dynamic-padding", "status": "accepted", "tokens_per_s": 5000.0},
                      {"name": "03-torch-compile", "status": "rejected", "tokens_per_s": 4900.0}],
           "trial_summary": {"stack": [{"name": "amp"}, {"name": "dynamic-padding"}]},
           "patch": {"verification": {"status": "verified", "tokens_per_s": 4800.0}}}
    apart = {"measurement": {"tokens_per_s": 1000.0},
             "trials": [{"name": "apart-float8-training", "apart": True, "status": "measured", "tokens_per_s": 1300.0}]}
    for mode, d in (("analyze", doc), ("apart", apart)):
        (tmp_path / mode / "gpt2").mkdir(parents=True)
        (tmp_path / mode / "gpt2" / "run.json").write_text(json.dumps(d))
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "transformers_table.py"), str(tmp_path)],
                          capture_output=True, text=True, check=True)
    assert ("| gpt2 | NVIDIA H200 | 1,000 | ADV101, ADV122 | amp, dynamic-padding | 5,000 | 4,800 (verified) "
            "| float8-training: measured 1.30x |") in proc.stdout


def test_speed_table_reads_the_modes_run_directories(tmp_path):
    """benchmarks/speed_table.py: per script, each mode's whole-analyze wall time, the stack it
    reached as a fraction of --budget 15's, and the second --cache analyze's compile share."""
    def run(mode: str, name: str, wall: float, stack: float, compile_s: float | None = None, gpus: int = 1):
        d = tmp_path / mode / name
        d.mkdir(parents=True)
        doc = {"measurement": {"samples_per_s": 100.0},
               "trial_summary": {"wall_s": wall, "compile_s": compile_s,
                                 "gpus": {"gpus": [{"gpu": str(i)} for i in range(gpus)]}},
               "trials": [{"name": "01-amp", "status": "accepted", "samples_per_s": stack}]}
        (d / "run.json").write_text(json.dumps(doc))

    run("one", "a", 200.0, 190.0)
    run("all", "a", 100.0, 200.0, gpus=4)
    run("full", "a", 900.0, 200.0)
    run("cache-first", "a", 210.0, 190.0, compile_s=40.0)
    run("cache-second", "a", 150.0, 190.0, compile_s=8.0)
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "speed_table.py"), str(tmp_path)],
                          capture_output=True, text=True, check=True)
    assert "| a | 200 s | 95% | 100 s (4 GPUs) | 100% | 900 s | 20% |" in proc.stdout
    # a run the timeout stopped: its wall is a floor, and a ladder cut short reached no stack
    doc = json.loads((tmp_path / "all" / "a" / "run.json").read_text())
    doc.update(status="interrupted", trial_summary={**doc["trial_summary"], "interrupted": True,
                                                    "gpus": {"why_one": "the model is DataParallel: ..."}})
    (tmp_path / "all" / "a" / "run.json").write_text(json.dumps(doc))
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "speed_table.py"), str(tmp_path)],
                          capture_output=True, text=True, check=True)
    assert "| a | 200 s | 95% | ≥ 100 s (timeout) (DataParallel) | – | 900 s | 20% |" in proc.stdout
    assert "median whole analyze, all: at least 100 s" in proc.stdout
    assert "median whole analyze, one: 200 s" in proc.stdout
    # a --budget 15 run whose baseline ran a quarter slower (a host shared by four analyzes):
    # the stacks are not held to each other
    full = json.loads((tmp_path / "full" / "a" / "run.json").read_text())
    full["measurement"]["samples_per_s"] = 75.0
    (tmp_path / "full" / "a" / "run.json").write_text(json.dumps(full))
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "speed_table.py"), str(tmp_path)],
                          capture_output=True, text=True, check=True)
    assert "| a | 200 s | not comparable | ≥ 100 s (timeout) (DataParallel) | – | 900 s | 20% |" in proc.stdout
    # --budget 15 with every GPU on the same machine: what "all" is held to, where it ran
    run("all", "b", 100.0, 190.0, gpus=4)
    run("full", "b", 900.0, 100.0)
    run("fullall", "b", 500.0, 200.0, gpus=4)
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "speed_table.py"), str(tmp_path)],
                          capture_output=True, text=True, check=True)
    assert "| b | – | – | 100 s (4 GPUs) | 95% | 900 s; all GPUs 500 s | – |" in proc.stdout
