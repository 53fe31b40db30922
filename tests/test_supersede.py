"""No hunk in fixes.patch that another kept fix supersedes (advisor.patch.supersede, Fix.supersedes):
examples/slow_loader.py, run under advisor with ``--workers 1`` for its real config (the worker
count's chain up to the command line), patched with dataloader-workers alone and with
preload-dataset on top. Alone, the workers' edit changes the command line and the DataLoader
call; with the preload, the diff is the preload's alone, the recommended command leaves
``--workers`` as the user gave it, and the patched script runs as plain python."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from advisor import fixes as registry
from advisor.fixes import make_patch
from advisor.patch import supersede

REPO = Path(__file__).resolve().parent.parent
ENV = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), CUDA_VISIBLE_DEVICES="")
ARGV = ["--workers", "1", "--steps", "12", "--sleep-ms", "1"]
WORKERS = {"intervention": "dataloader-workers", "params": {"num_workers": 2, "pin_memory": False}}
PRELOAD = {"intervention": "preload-dataset", "params": {}}


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    """slow_loader.py's baseline under advisor (no trials): its run.json."""
    tmp = tmp_path_factory.mktemp("slow")
    shutil.copy(REPO / "examples" / "slow_loader.py", tmp / "slow_loader.py")
    subprocess.run(["git", "init", "-q"], cwd=tmp, check=True)   # its own repository: the diff's root
    r = subprocess.run([sys.executable, "-m", "advisor", "analyze", "--no-trials", "--out", str(tmp / "run"),
                        "--warmup", "2", "--steps", "4", "--min-time", "0", "--profile-steps", "1",
                        "slow_loader.py", *ARGV], cwd=tmp, env=ENV, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    return tmp, json.loads((tmp / "run" / "run.json").read_text())


def _patch(baseline, specs):
    tmp, doc = baseline
    texts: dict = {}
    diff, notes = make_patch("slow_loader.py", [dict(s) for s in specs], doc["config"], cwd=str(tmp),
                             executed=doc.get("executed_lines"), argv=ARGV, texts=texts)
    return diff, {n["intervention"]: n for n in notes}, texts


def test_the_workers_edit_alone_changes_the_command_line_and_the_call(baseline):
    diff, notes, _ = _patch(baseline, [WORKERS])
    workers = notes["dataloader-workers"]
    assert workers["applied"] and "superseded_by" not in workers
    assert workers["argv_changes"] == [{"flag": "--workers", "from": "1", "to": "2"}]
    assert "persistent_workers" in diff


def test_a_preloaded_dataset_leaves_no_workers_hunk_in_the_patch(baseline):
    tmp, _ = baseline
    diff, notes, texts = _patch(baseline, [WORKERS, PRELOAD])
    workers, preload = notes["dataloader-workers"], notes["preload-dataset"]
    assert preload["applied"] and "superseded_by" not in preload
    assert workers["superseded_by"] == "preload-dataset" and workers["edits"] == []
    assert "num_workers=0 and no pinned memory" in workers["warning"]
    assert not workers.get("argv_changes")            # the command keeps --workers 1: nothing reads it
    changed = [ln for ln in diff.splitlines() if ln.startswith(("+", "-")) and not ln.startswith(("+++", "---"))]
    assert not any("persistent_workers" in ln or "prefetch_factor" in ln or "--workers" in ln for ln in changed), diff
    # the diff is exactly the preload's alone, and the texts are its
    alone, _, alone_texts = _patch(baseline, [PRELOAD])
    assert diff == alone and texts == alone_texts
    # it applies where the user stands and runs as plain python, the preloaded loader in place
    (tmp / "fixes.patch").write_text(diff)
    subprocess.run(["git", "apply", "fixes.patch"], cwd=tmp, check=True)
    r = subprocess.run([sys.executable, "slow_loader.py", *ARGV], cwd=tmp, env=ENV, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0 and "done: 12 steps" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
    subprocess.run(["git", "apply", "-R", "fixes.patch"], cwd=tmp, check=True)


def test_a_superseding_fix_that_is_not_placed_supersedes_nothing():
    """The composition alone: where preload-dataset's edit is not placed (its note says why), the
    workers' edit stays in the patch."""
    calls = []

    def make(script, specs, config, root, *, texts=None, registry=None, **kw):
        calls.append([s["intervention"] for s in specs])
        notes = [{"intervention": s["intervention"], "applied": s["intervention"] != "preload-dataset",
                  **({"reason": "no DataLoader call observed"} if s["intervention"] == "preload-dataset" else {})}
                 for s in specs]
        return "diff of " + "+".join(n["intervention"] for n in notes if n["applied"]), notes

    diff, notes = supersede.make_patch(make, "train.py", [WORKERS, PRELOAD], {}, None, registry=registry)
    assert calls == [["dataloader-workers", "preload-dataset"]] and diff == "diff of dataloader-workers"
    assert "superseded_by" not in notes[0] and notes[1]["reason"] == "no DataLoader call observed"
    assert supersede.superseded([{"intervention": "dataloader-workers", "applied": True},
                                 {"intervention": "pin-memory", "applied": True},
                                 {"intervention": "preload-dataset", "applied": True}], registry) == \
        {"dataloader-workers": "preload-dataset", "pin-memory": "preload-dataset"}
