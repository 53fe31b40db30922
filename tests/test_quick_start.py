"""The README's first command, exactly as a new user runs it on a CPU: `advisor analyze
examples/slow_loader.py` from the repository's root (here a copy of it). It must show the
product: a finding, a kept fix, a patch verified as plain python, the summary that says so, and
a report whose headline, kept fix, patch and verification agree (opened in headless Chromium).
Its wall time is printed, not asserted (benchmarks hold speed targets)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import chromium

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()


def test_the_readme_names_this_command_first():
    block = README.split("## Set up and try it", 1)[1].split("##", 1)[0]
    commands = re.findall(r"^    (.*advisor analyze .*)$", block, re.M)
    assert commands and commands[0].endswith("advisor analyze examples/slow_loader.py"), commands


@pytest.mark.skipif(chromium.chromium() is None, reason="no chromium (apt-get install chromium)")
def test_the_quick_start_shows_a_finding_a_kept_fix_and_a_verified_patch(tmp_path):
    (tmp_path / "examples").mkdir()
    shutil.copy(REPO / "examples" / "slow_loader.py", tmp_path / "examples")
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), COLUMNS="80")
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "advisor", "analyze", "examples/slow_loader.py"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=900)
    wall = time.monotonic() - start
    print(f"quick start: {wall:.0f} s")
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = list((tmp_path / "reports").iterdir())
    run = next(r for r in runs if r.is_dir())
    doc = json.loads((run / "run.json").read_text())
    assert any(f["code"] == "ADV103" for f in doc["findings"]), [f["code"] for f in doc["findings"]]
    kept = [t for t in doc["trials"] if t["status"] == "accepted" and not t.get("apart")]
    assert kept and kept[0]["fix"] in ("dataloader-workers", "precompute-samples", "preload-dataset"), doc["trials"]
    v = doc["patch"]["verification"]
    assert v["status"] == "verified", (v.get("of_stack"), v.get("samples_per_s"), v.get("stack_samples_per_s"),
                                       v.get("runs"), doc["trial_summary"].get("threshold"),
                                       [(t["name"], t["status"], t.get("samples_per_s")) for t in doc["trials"]])
    out = proc.stderr + proc.stdout
    summary = " ".join(out.split("summary", 1)[1].split())   # the terminal wraps at 80 columns
    assert "findings: " in summary and f"kept: {kept[0]['fix']}" in summary
    assert "verified as plain python" in summary and "run: python examples/slow_loader.py" in summary
    page = chromium.open_page(run / "index.html", screenshot=REPO / "tests" / "_artifacts" / "quick_start.png")
    dom = page.dom
    assert kept[0]["fix"] in dom and 'id="verification"' in dom and 'id="command"' in dom
    assert "fixes.patch" in dom and "Diagnosis only" not in dom and "no fix kept" not in dom.lower()
    assert not page.console and not page.requests, (page.console, page.requests)
