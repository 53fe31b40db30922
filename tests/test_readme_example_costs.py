"""The README's first example end to end, `advisor analyze examples/slow_loader.py` with default
options, on this CPU host: whatever its trials measure (the host's load moves them), what it
hands back holds together. The run is 40 steps at most (a step count breaks its loops), a kept
fix pays back within them or only the lead-in's noise says otherwise, a fix left out measured a
one-off beyond that noise, the patch carries no superseded hunk, and no data-free ceiling stands
as a bound under a run of its compute fixes measured above it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from advisor import costs, fixes

REPO = Path(__file__).resolve().parent.parent
ENV = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), CUDA_VISIBLE_DEVICES="")


def test_the_readme_example_hands_back_costs_that_hold_together(tmp_path):
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    r = subprocess.run([sys.executable, "-m", "advisor", "analyze", "--out", str(tmp_path / "run"),
                        "examples/slow_loader.py"], cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads((tmp_path / "run" / "run.json").read_text())
    length = doc["run_length"]
    assert length["steps"] == 40 and length["at_most"] and length["source"].startswith("at most len(loader) 40 × 1 epochs")

    lead = doc["trial_summary"]["lead_in"]
    repeat = next(t for t in doc["trials"] if t["fix"] == costs.REPEAT_FIX)
    assert round(repeat["one_off_s"], 2) in lead["repeats_one_off_s"]
    assert lead["noise_s"] >= max(lead["expected_s"], abs(repeat["one_off_s"])) - 0.01
    for t in doc["trials"]:
        if t.get("one_off_s") is not None:
            assert t["one_off_noise_s"] == lead["noise_s"]
            assert t["one_off_within_noise"] == (abs(t["one_off_s"]) <= lead["noise_s"])

    patch = doc.get("patch") or {}
    for share in patch.get("payback") or []:
        if share["fix"] in (patch.get("left_out") or {}):
            assert share["paid"] is False
            assert share["one_off_s"] - share["noise_s"] > share["saved_per_step_s"] * 40, share
        else:
            assert share["paid"] is not False
            even = share["break_even_steps"]
            assert (even is not None and even <= 40) or share["within_noise"], share

    # no hunk that a placed fix supersedes
    notes = {n["intervention"]: n for n in patch.get("notes") or []}
    diff = (tmp_path / "run" / "fixes.patch").read_text() if patch.get("file") else ""
    changed = [ln for ln in diff.splitlines() if ln.startswith(("+", "-")) and not ln.startswith(("+++", "---"))]
    for name, note in notes.items():
        for gone in fixes.trait(name, "supersedes", ()) if note.get("applied") else ():
            if gone in notes:
                assert notes[gone]["superseded_by"] == name and notes[gone]["edits"] == []
                assert not notes[gone].get("argv_changes")
                assert not any("--workers" in ln or "persistent_workers" in ln for ln in changed), diff

    # a ceiling still standing as a bound has no run of its compute fixes above it beyond the threshold
    band = max(0.03, doc["trial_summary"].get("threshold") or 0.0)
    for c in (t for t in doc["trials"] if t.get("ceiling") and t.get("status") == "bound"):
        mine = set(costs._compute_keys(c["interventions"]))
        for t in doc["trials"]:
            if not t.get("ceiling") and t.get("samples_per_s") and set(costs._compute_keys(t.get("interventions"))) <= mine \
                    and t.get("status") in ("accepted", "rejected", "unsure", "reference"):
                assert t["samples_per_s"] <= c["samples_per_s"] * (1 + band), (t["name"], t["samples_per_s"], c)
    for c in (t for t in doc["trials"] if t.get("ceiling") and t.get("above")):
        assert c["status"] == "measured" and "no data fix can" not in c["reason"]
