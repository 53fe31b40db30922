"""Progress is not only an optimizer step: an evaluation pass or checkpoint writes between steps,
longer than the stall limit, are work (runner/liveness.py); a sleep is still a stall. Real child
processes on the CPU, with a stall limit of 3 s and pauses of 8 s."""

from __future__ import annotations

import json
import os

import pytest
from test_runner_support import line_of, run_many, write

STALL_S = 3
PAUSE_S = 8

# After step 30 (at it == 31, before its forward) the script pauses with PAUSE, then trains on.
SCRIPT = """
import time
import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
ds = TensorDataset(torch.randn(256, 8), torch.randn(256, 1))
loader = DataLoader(ds, batch_size=8, shuffle=True)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
held_out = torch.randn(64, 8)


def pause():
    end = time.monotonic() + PAUSE_S
    PAUSE


it = 0
for epoch in range(1000):
    for x, y in loader:
        it += 1
        if it == 31:
            pause()
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
"""

# many short forward passes under no_grad, each far under the limit (the sleep stands for the
# rest of a bigger model's forward and keeps a 2-core machine free)
EVALUATE = """with torch.no_grad():
        while time.monotonic() < end:
            model(held_out)
            time.sleep(0.02)"""
EVAL_MODE = "model.eval()\n    " + EVALUATE + "\n    model.train()"
SAVES = """while time.monotonic() < end:
        torch.save(model.state_dict(), "ckpt.pt")
        time.sleep(0.05)"""

IN_WARMUP = dict(warmup_steps=35, measure_steps=5)     # step 31 is a warm-up step
IN_WINDOW = dict(warmup_steps=20, measure_steps=20)    # the window times steps 21-40

SCENARIOS = {
    "eval_warmup": dict(pause=EVALUATE, **IN_WARMUP),
    "eval_window": dict(pause=EVALUATE, **IN_WINDOW),
    "eval_mode_window": dict(pause=EVAL_MODE, **IN_WINDOW),
    "saves_window": dict(pause=SAVES, **IN_WINDOW),
    "sleep_window": dict(pause="time.sleep(600)", timeout=120, **IN_WINDOW),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("alive")
    jobs = {}
    for name, sc in SCENARIOS.items():
        sc = dict(sc)
        text = SCRIPT.replace("PAUSE_S", str(PAUSE_S)).replace("PAUSE", sc.pop("pause"))
        script = write(tmp / name / "train.py", text)
        jobs[name] = dict(script=script, argv=["train.py"], cwd=str(tmp / name), run_dir=str(tmp / name / "run"),
                          stall_timeout=STALL_S, profile_steps=2, measure_min_s=0.0, **{"timeout": 90, **sc})
    done = run_many(jobs, tmp / "drivers", workers=3)
    out = {}
    for name, (res, _o, err) in done.items():
        with open(os.path.join(jobs[name]["run_dir"], "progress.jsonl")) as f:
            records = [json.loads(line) for line in f if line.strip()]
        out[name] = (res, err, records)
    return out


def _alive_after_step_30(records) -> int:
    """The "alive" records between step 30's record and step 31's (the pause)."""
    steps = [i for i, r in enumerate(records) if r["stage"] in ("warmup", "measure", "profile")]
    at30 = next(i for i in steps if records[i]["step"] == 30)
    at31 = next((i for i in steps if records[i]["step"] == 31), len(records))
    return sum(r["stage"] == "alive" for r in records[at30:at31])


def _completed(res) -> None:
    assert res["status"] == "complete", res["incomplete_reasons"]
    assert not res["stalled"] and res["steps_seen"] >= 43
    assert "alive" not in {stage for stage, _ in res["_progress"]}  # not shown to on_progress


def test_an_evaluation_longer_than_the_stall_limit_is_progress(runs):
    """Forward passes under no_grad, no .eval(), during the warm-up (the loop hooks see them)."""
    res, err, records = runs["eval_warmup"]
    _completed(res)
    assert _alive_after_step_30(records) >= PAUSE_S - STALL_S
    # the pass fell in warm-up step 31 (the longest after the first, which holds the script's
    # start-up) and in no timed step
    warm = res["warmup_step_times_ms"]
    assert len(warm) == 35 and max(warm[1:]) == warm[30], warm
    assert len(res["step_times_ms"]) == 5 and max(res["step_times_ms"]) < warm[30], res["step_times_ms"]


def test_an_evaluation_between_timed_steps_is_progress(runs):
    """In the timed window the loop hooks are off: the watch arms its hook in the pause."""
    res, err, records = runs["eval_window"]
    _completed(res)
    assert _alive_after_step_30(records) >= PAUSE_S - STALL_S


def test_an_evaluation_pass_in_eval_mode_between_timed_steps_is_progress_and_left_out(runs):
    res, err, records = runs["eval_mode_window"]
    _completed(res)
    assert _alive_after_step_30(records) >= PAUSE_S - STALL_S
    # .eval() to .train(): taken out of the step it fell in, as before
    assert res["left_out_steps"] == {"evaluation": 1} and res["left_out_ms"] >= PAUSE_S * 1e3 - 100
    # the step it fell in does not hold it (it would be longer than the pass alone)
    assert len(res["step_times_ms"]) == 20 and max(res["step_times_ms"]) < res["left_out_ms"], res["step_times_ms"]


def test_checkpoint_writes_are_progress(runs):
    """torch.save alone, between timed steps: no forward, no batch, no backward."""
    res, err, records = runs["saves_window"]
    _completed(res)
    assert _alive_after_step_30(records) >= PAUSE_S - STALL_S


def test_a_sleep_is_still_a_stall(runs):
    res, err, records = runs["sleep_window"]
    reason = res["incomplete_reasons"][0]
    assert res["status"] == "incomplete" and res["stalled"], res["incomplete_reasons"]
    assert reason.startswith("stalled: no progress (no training step, forward, batch or backward) "
                             f"for {STALL_S} s after step 30 (its median step: "), reason
    assert res["exit"]["code"] == -2 and res["steps_seen"] == 30
    stacks_path = reason.rsplit(" ", 1)[1]
    script = os.path.join(os.path.dirname(os.path.dirname(stacks_path)), "train.py")
    stacks = open(stacks_path).read()
    assert f'train.py", line {line_of(script, "time.sleep(600)")} in pause' in stacks, stacks
    assert f'train.py", line {line_of(script, "  pause()")} in <module>' in stacks, stacks
    assert "liveness" not in stacks  # the watch's thread had armed its hook and ended: the script's threads alone
