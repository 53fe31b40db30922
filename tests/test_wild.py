"""The wild corpus's tooling (benchmarks/wild.py), without its fetched code or the network: the
manifest names every entry's repository, commit and commands; the stand-in data and the
download shims make what the scripts read; the scoreboard is read from run.json as written; a
script that fails as plain python is recorded so, not analyzed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import wild  # noqa: E402

standin = wild.standin  # benchmarks/wild/standin.py, as wild.py imports it

OURS = {"manifest.json", "standin.py", "scoreboard.json", "README.md", "shims/sitecustomize.py", "shims/stubs/wandb/__init__.py"}


def test_manifest_names_thirty_scripts_of_twenty_repositories():
    entries = wild.load_manifest()
    assert len(entries) >= 30 and len({e.repo for e in entries}) >= 20
    assert len({e.name for e in entries}) == len(entries)
    kinds = {e.kind for e in entries}
    assert {"gan", "diffusion", "lm-pretrain", "vision-classifier", "segmentation", "lightning", "hf-accelerate"} <= kinds
    for e in entries:
        assert e.repo.count("/") == 1 and len(e.commit) == 40 and int(e.commit, 16) >= 0, e.name
        assert e.paths and all(not p.startswith("/") and ".." not in p for p in e.paths), e.name
        assert not e.cwd.startswith("/") and e.readme, e.name
        assert e.gpu and (e.cpu or e.cpu_skip), e.name
        for command in filter(None, (e.cpu, e.gpu, e.fast)):
            assert wild.script_argv(command)[0].endswith(".py"), (e.name, command)
        for spec in e.data:
            assert spec["kind"] == "shim" or spec["kind"] in standin.PLAIN or spec["kind"] in standin.HUB, (e.name, spec)
    assert sum(e.gpu_pick for e in entries) >= 8


def test_no_third_party_code_is_committed():
    tracked = subprocess.run(["git", "ls-files", "benchmarks/wild"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    files = {str(Path(p).relative_to("benchmarks/wild")) for p in tracked.split()}
    assert files <= OURS, files - OURS
    ignored = subprocess.run(["git", "check-ignore", "-q", "benchmarks/wild/src/x/train.py"], cwd=ROOT)
    assert ignored.returncode == 0


def test_script_argv_drops_the_interpreter_and_its_flags():
    assert wild.script_argv("python -u trainer.py --arch=resnet20") == ["trainer.py", "--arch=resnet20"]
    assert wild.script_argv("python3 src/train.py trainer=cpu") == ["src/train.py", "trainer=cpu"]
    with pytest.raises(ValueError):
        wild.script_argv("python -m torch.distributed.run x.py")


def test_stand_in_data_is_made_in_the_working_directory(tmp_path):
    cwd = tmp_path / "a" / "b"
    cwd.mkdir(parents=True)
    standin.make(cwd, [
        {"kind": "images", "dir": "../../data/x/train/A", "n": 3, "size": [40, 30]},
        {"kind": "images", "dir": "pets", "n": 2, "classes": 3, "stem": "breed{c}_{i}"},
        {"kind": "imagefolder", "dir": "data/imagenet", "splits": ["train", "validation"], "classes": 2, "per_class": 2,
         "val_per_class": 1, "size": [32, 32]},
        {"kind": "masks", "images": "data/imgs", "masks": "data/masks", "mask_suffix": "_mask", "n": 2, "size": [64, 48]},
        {"kind": "voc", "dir": "voc", "n": 8, "size": [64, 48]},
        {"kind": "text", "path": "data/e.gz", "bytes": 5000, "gzip": True},
        {"kind": "text", "path": "input.txt", "bytes": 777},
        {"kind": "shim"},
    ], "cpu", tmp_path / "hf")
    assert len(list((tmp_path / "data/x/train/A").glob("*.jpg"))) == 3
    assert sorted(p.name for p in (cwd / "pets").iterdir())[:2] == ["breed0_0.jpg", "breed0_1.jpg"]
    assert len(list((cwd / "data/imagenet/validation").rglob("*.JPEG"))) == 2
    assert (cwd / "data/masks/img0001_mask.png").is_file()
    assert (cwd / "voc/VOCdevkit/VOC2012/ImageSets/Segmentation/train.txt").read_text().split() == \
        [f"2007_{i:06d}" for i in range(1, 8)]
    import gzip
    assert len(gzip.decompress((cwd / "data/e.gz").read_bytes())) == 5000
    assert len((cwd / "input.txt").read_bytes()) == 777
    from PIL import Image
    assert Image.open(cwd / "data/imgs/img0000.jpg").size == (64, 48)


def test_shim_swaps_torchvision_downloads_for_synthetic_data_of_the_same_shapes(tmp_path):
    pytest.importorskip("torchvision")
    code = ("from torchvision import datasets, transforms\n"
            "m = datasets.MNIST('../../data/mnist', train=False, download=True, transform=transforms.ToTensor())\n"
            "from torchvision.datasets import CIFAR100\n"
            "c = CIFAR100(root='~/data', train=True, download=False)\n"
            "import torch\n"
            "print(len(m), tuple(m[0][0].shape), len(c), c[0][0].size, c[0][0].mode, max(c.targets) < 100)\n"
            "print(torch.zeros(1).cuda().device.type)\n")
    env = {**os.environ, "WILD_SHIM": "1", "WILD_CPU_CUDA": "1", "WILD_DATA_N": "500",
           "PYTHONPATH": str(wild.SHIMS), "CUDA_VISIBLE_DEVICES": ""}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[:2] == ["500 (1, 28, 28) 500 (32, 32) RGB True", "cpu"]
    assert not any(tmp_path.rglob("*")) and not (tmp_path.parent.parent / "data").exists()


def _doc(trials: list[dict], patch: dict | None) -> dict:
    return {"status": "complete", "incomplete_reasons": [], "measurement": {"samples_per_s": 100.0},
            "command": {"script": "/w/train.py", "argv": ["/w/train.py", "--amp", "0", "-j", "1"], "cwd": "/w"},
            "trials": trials, "trial_summary": {"wall_s": 231.5, "noise": 0.01}, "patch": patch}


def test_scoreboard_reads_run_json(tmp_path):
    trials = [
        {"name": "00-baseline-repeat", "fix": "baseline (repeat)", "status": "reference", "one_off_s": -0.4},
        {"name": "01-amp", "fix": "amp", "status": "accepted", "one_off_s": 1.0},
        {"name": "02-channels-last", "fix": "channels-last", "status": "failed", "reason": "RuntimeError",
         "failure": {"kind": "advisor", "where": "intervention"}},
        {"name": "03-workers", "fix": "dataloader-workers", "status": "failed", "reason": "boom", "failure": {"kind": "script"}},
        {"name": "apart-batch-size-x2", "fix": "batch-size", "status": "accepted", "apart": True},
        {"name": "04-compile", "fix": "torch-compile", "status": "rejected"},
        {"name": "05-tf32", "fix": "tf32", "status": "not run"},
        {"name": "ceiling-data-free", "fix": "cached-batch", "status": "measured"},
    ]
    patch = {"file": "fixes.patch", "command": ["python", "/w/train.py", "--amp", "1", "-j", "1"],
             "verification": {"status": "verified", "samples_per_s": 150.0, "stack_samples_per_s": 160.0, "wall_s": 20.0}}
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps(_doc(trials, patch)))
    got = wild.read_run(run)
    assert got["completed"] and got["trials"] == 5 and got["failed_trials"] == 2 and got["advisor_failures"] == 1
    assert got["kept"] == ["01-amp"] and got["patch_status"] == "verified" and got["command_changed"]
    assert got["repeat_one_off_s"] == -0.4 and got["analyze_wall_s"] == 231.5 and got["verified_samples_per_s"] == 150.0
    assert [f["kind"] for f in got["failures"]] == ["advisor", "script"]

    unchanged = {"file": None, "command": ["python", "/w/train.py", "--amp", "0", "-j", "1"]}
    (run / "run.json").write_text(json.dumps(_doc(trials[:2], unchanged)))
    same = wild.read_run(run)
    assert same["patch_status"] == "none" and not same["command_changed"] and same["failed_trials"] == 0
    assert wild.read_run(tmp_path / "nothing") == {"completed": False, "run_json": False}
    # the repeat (the baseline's own configuration) failing is advisor's, and so is each trial failing alike
    boom = {"kind": "script", "exception": "PathError", "message": "parent directory does not exist: 'logs/v1'"}
    alike = [{**trials[0], "status": "failed", "failure": boom}, {**trials[3], "failure": boom}, trials[2]]
    (run / "run.json").write_text(json.dumps(_doc(alike, None)))
    got_alike = wild.read_run(run)
    assert got_alike["repeat_failed"] and got_alike["suspect_advisor_failures"] == 2 and got_alike["advisor_failures"] == 1

    board = tmp_path / "scoreboard.json"
    base = {"name": "x", "repo": "o/r", "commit": "a" * 40, "command": "python train.py", "device": "cpu", "budget_s": 240}
    wild.merge(board, [{**base, **same}])
    doc = wild.merge(board, [{**base, **got, "wall_s": 250.0}, {**base, "name": "y", "completed": False, "skipped": "fails as plain python",
                                                               "plain": {"tail": "Traceback\nImportError: no module named foo"}}])
    assert [r["name"] for r in doc["scripts"]] == ["x", "y"] and doc["scripts"][0]["kept"] == ["01-amp"]
    keys = {"name", "repo", "commit", "command", "device", "completed", "trials", "failed_trials", "advisor_failures", "kept",
            "patch_status", "command_changed"}
    assert keys <= set(doc["scripts"][0]) and "date" in json.loads(board.read_text())
    text = wild.table(doc)
    assert "| x | o/r @ aaaaaaa | cpu | yes | 5 (2, 1) | 01-amp | verified | yes |" in text
    assert "ImportError: no module named foo" in text
    assert wild.within_budget({"wall_s": 250.0, "budget_s": 240, "verify_wall_s": 20.0})
    assert wild.within_budget({"analyze_wall_s": 300.0, "wall_s": 301.0, "budget_s": 240, "verify_wall_s": 20.0}) is False
    assert "over budget + verification: none" in text


def test_a_script_that_fails_as_plain_python_is_recorded_not_analyzed(tmp_path, monkeypatch):
    src = tmp_path / "src" / "o+r"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "train.py").write_text("import os\nopen('../cfg/missing.yaml').read()\n")
    (src / ".wild-commit").write_text("b" * 40 + "\n")
    monkeypatch.setenv("WILD_SRC", str(tmp_path / "src"))
    monkeypatch.setenv("WILD_WORK", str(tmp_path / "work"))
    entry = wild.Entry(name="broken", repo="o/r", commit="b" * 40, paths=["sub"], cwd="sub", readme="python train.py",
                       cpu="python train.py --x 1", gpu="python train.py")
    row = wild.run_entry(entry, "cpu", 60, 30, 0, tmp_path / "runs", fast=False)
    assert row["skipped"] == "fails as plain python" and not row["completed"]
    assert row["plain"]["exit"] == 1 and "FileNotFoundError" in row["plain"]["tail"]
    ok = wild.Entry(name="ok", repo="o/r", commit="b" * 40, paths=["sub"], cwd="sub", readme="", cpu=None, gpu="python t.py",
                    cpu_skip="hard-codes cuda")
    assert wild.run_entry(ok, "cpu", 60, 30, 0, tmp_path / "runs", fast=False)["skipped"] == "hard-codes cuda"
    needs = wild.Entry(name="needs", repo="o/r", commit="b" * 40, paths=["sub"], cwd="sub", readme="", cpu="python train.py",
                       gpu="python train.py", requires=["no_such_module_here"])
    assert wild.run_entry(needs, "cpu", 60, 30, 0, tmp_path / "runs", fast=False)["skipped"] == \
        "needs no_such_module_here (not installed)"


def test_fetch_extracts_the_listed_paths_at_the_commit_from_a_snapshot(tmp_path, monkeypatch):
    work = tmp_path / "upstream"
    (work / "src" / "pkg").mkdir(parents=True)
    (work / "src" / "pkg" / "train.py").write_text("print('v1')\n")
    (work / "other.py").write_text("x = 1\n")
    (work / "run.sh").write_text("#!/bin/sh\n")
    (work / "run.sh").chmod(0o755)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q", str(work)], check=True)
    subprocess.run([*git, "-C", str(work), "add", "."], check=True)
    subprocess.run([*git, "-C", str(work), "commit", "-qm", "v1"], check=True)
    commit = subprocess.run(["git", "-C", str(work), "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    (work / "src" / "pkg" / "train.py").write_text("print('v2')\n")
    subprocess.run([*git, "-C", str(work), "commit", "-qam", "v2"], check=True)
    mirror = tmp_path / "mirror" / "own+proj"
    mirror.mkdir(parents=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(mirror / "repo")], check=True)
    monkeypatch.setenv("WILD_MIRROR", str(tmp_path / "mirror"))
    monkeypatch.setenv("WILD_SRC", str(tmp_path / "src"))
    entry = wild.Entry(name="p", repo="own/proj", commit=commit, paths=["src", "run.sh"], cwd="src", readme="", cpu=None,
                       gpu="python pkg/train.py")
    assert wild.fetch([entry]) == 0
    dest = tmp_path / "src" / "own+proj"
    assert (dest / "src" / "pkg" / "train.py").read_text() == "print('v1')\n"   # the recorded commit, not the newest
    assert not (dest / "other.py").exists() and os.access(dest / "run.sh", os.X_OK)
    assert (dest / ".wild-commit").read_text().strip() == commit
    gone = wild.Entry(name="q", repo="own/absent", commit=commit, paths=["x"], cwd=".", readme="", cpu=None, gpu="python x.py")
    assert wild.fetch([gone]) == 1
