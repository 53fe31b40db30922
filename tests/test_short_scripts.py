"""Any script gets an answer: a script shorter than advisor's schedule is timed and profiled in
runs of their own (advisor.schedule), and a script that profiles itself keeps its traces."""

from __future__ import annotations

import json
import textwrap

import pytest
from test_cli import advisor

from advisor import schedule

# The PyTorch profiler tutorial's pattern: ten steps under the script's own profiler, which
# writes a TensorBoard trace; the script saves a checkpoint at the end.
TUTORIAL = """
    import time
    import torch
    import torch.nn as nn

    class Images(torch.utils.data.Dataset):  # decoding an image takes a while
        def __len__(self): return 352
        def __getitem__(self, i):
            time.sleep(0.0005)
            return torch.full((3, 32, 32), i / 352), i % 10

    train_loader = torch.utils.data.DataLoader(Images(), batch_size=32, shuffle=True)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(),
                          nn.Linear(256, 10))
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def train(data):
        inputs, labels = data
        loss = criterion(model(inputs), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    with torch.profiler.profile(
            schedule=torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=1),
            on_trace_ready=torch.profiler.tensorboard_trace_handler("./log/tutorial"),
            record_shapes=True, with_stack=True) as prof:
        for step, batch_data in enumerate(train_loader):
            prof.step()
            if step >= 10:
                break
            train(batch_data)
    torch.save(model.state_dict(), "model.pt")
    print("trained", step, "steps")
"""

SIXTY = """
    import time
    import torch
    import torch.nn as nn

    class Slow(torch.utils.data.TensorDataset):
        def __getitem__(self, i):   # the loader clearly dominates the step (ADV103) on any host
            time.sleep(0.001)
            return super().__getitem__(i)

    data = Slow(torch.randn(600, 64), torch.randint(0, 4, (600,)))
    loader = torch.utils.data.DataLoader(data, batch_size=20, shuffle=True)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 4))
    opt = torch.optim.Adam(model.parameters())
    for epoch in range(2):
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
"""


def _analyze(tmp_path, name: str, source: str, *args):
    (tmp_path / name).write_text(textwrap.dedent(source))
    r = advisor("analyze", "--out", tmp_path / "run", "--max-trials", "1", *args, name, cwd=tmp_path, timeout=600)
    return r, json.loads((tmp_path / "run" / "run.json").read_text())


def test_the_profiler_tutorial_pattern_gets_an_answer_and_keeps_its_own_traces(tmp_path):
    r, doc = _analyze(tmp_path, "tutorial.py", TUTORIAL)
    assert r.returncode == 0, r.stderr[-3000:]
    assert doc["status"] == "complete", doc["incomplete_reasons"]
    # measured, then profiled in a run of its own within the script's ten steps
    assert doc["measurement"]["steps_measured"] >= 3 and doc["measurement"]["samples_per_s"] > 0
    assert doc["schedule"]["script_steps"] == 10
    assert [x["run"] for x in doc["schedule"]["runs"]] == ["first", "profile"]
    assert doc["analysis"]["steps_in_trace"] >= 1 and doc["findings"]
    assert (tmp_path / "run" / doc["traces"]["baseline"][0]).is_file()
    assert [t for t in doc["trials"] if t["status"] not in ("reference", "skipped", "not run")]
    # the script's own TensorBoard trace is where it asked, written in a run advisor made for it
    written = sorted((tmp_path / "log" / "tutorial").glob("*.pt.trace.json"))
    assert len(written) == 1 and json.loads(written[0].read_text())["traceEvents"]
    assert doc["own_traces"]["status"] == "written" and doc["own_traces"]["traces"] == [str(written[0])]
    assert "your profiler's trace: " + str(written[0]) in r.stderr.replace("\n", "")
    # that run was sandboxed but for its traces: its checkpoint went to the run directory
    assert list((tmp_path / "run" / "schedule" / "own-profiler" / "outputs").rglob("model.pt"))
    html = (tmp_path / "run" / "index.html").read_text()
    assert 'id="own-traces"' in html and 'id="schedule"' in html


def test_a_sixty_step_script_on_a_cpu_gets_findings_and_trials(tmp_path):
    # 80 timed steps asked: short whatever the host's speed (at the default 20 and a min time,
    # a slow host's window closed within 60 steps and needed no runs of its own)
    r, doc = _analyze(tmp_path, "train60.py", SIXTY, "--steps", "80")
    assert r.returncode == 0, r.stderr[-3000:]
    assert doc["status"] == "complete", doc["incomplete_reasons"]
    assert doc["schedule"]["script_steps"] == 60 and doc["measurement"]["steps_measured"] >= 3
    assert doc["analysis"]["steps_in_trace"] >= 1 and doc["findings"]
    trials = [t for t in doc["trials"] if t["status"] not in ("reference", "skipped", "not run")]
    profiled = [t for t in trials if t["status"] != "failed" and not t.get("ceiling")]   # the ceiling is timed only
    assert profiled and all(t.get("traces") for t in profiled), [(t["name"], t["status"]) for t in profiled if not t.get("traces")]


def test_a_five_step_script_is_timed_and_profiled_in_runs_of_their_own(tmp_path):
    five = SIXTY.replace("600", "100").replace("range(2)", "range(1)")   # one epoch of 5 batches
    r, doc = _analyze(tmp_path, "train5.py", five, "--no-trials")
    assert r.returncode == 0, r.stderr[-3000:]
    assert doc["schedule"]["script_steps"] == 5
    runs = {x["run"]: x for x in doc["schedule"]["runs"]}
    assert runs["timing"]["warmup_steps"] == 2 and runs["timing"]["measure_steps"] == 3
    assert runs["profile"]["warmup_steps"] + 1 + runs["profile"]["profile_steps"] <= 5
    assert doc["measurement"]["steps_measured"] == 3 and doc["analysis"]["steps_in_trace"] >= 1


@pytest.mark.parametrize("steps,timed,traced,timing,profile", [
    (10, 5, False, None, {"warmup_steps": 5, "profile_steps": 3}),
    (10, 0, False, {"warmup_steps": 3, "measure_steps": 7}, {"warmup_steps": 5, "profile_steps": 3}),
    (6, 1, False, {"warmup_steps": 2, "measure_steps": 4}, {"warmup_steps": 2, "profile_steps": 3}),
    (4, 0, False, {"warmup_steps": 1, "measure_steps": 3}, {"warmup_steps": 2, "profile_steps": 1}),
    (60, 55, False, None, {"warmup_steps": 5, "profile_steps": 3}),
    (30, 2, True, {"warmup_steps": 5, "measure_steps": 25}, None),
])
def test_the_plan_splits_the_phases_within_the_scripts_length(steps, timed, traced, timing, profile):
    child = {"exit": {"code": 0, "stopped_by_advisor": False}, "steps_seen": steps,
             "step_times_ms": [1.0] * timed, "measure_window_ms": float(timed) or None,
             "trace_files": ["tb/baseline/x.pt.trace.json.gz"] if traced else []}
    sched = schedule.plan(child, profile_steps=3, warmup=5)
    assert (sched.timing, sched.profile) == (timing, profile)
    if profile:
        assert profile["warmup_steps"] + 1 + profile["profile_steps"] <= steps


def test_no_plan_when_the_script_did_not_end_by_itself():
    crashed = {"exit": {"code": 1, "stopped_by_advisor": False}, "steps_seen": 4}
    stopped = {"exit": {"code": 0, "stopped_by_advisor": True}, "steps_seen": 29}
    stalled = {"exit": {"code": 0, "stopped_by_advisor": False}, "steps_seen": 9, "stalled": True}
    one = {"exit": {"code": 0, "stopped_by_advisor": False}, "steps_seen": 1}
    assert [schedule.plan(c, 3, 5) for c in (crashed, stopped, stalled, one)] == [None] * 4
