"""Failures isolated and named (docs/trials.md, "Failed trials"): a process that fails is the
script's own error (its line quoted), advisor's (its bug), or the environment's; the summary
counts failed trials apart from rejected ones; a failed rung of several fixes is split and each
fix trialled alone; a model conversion acts on the modules that own the weights, never through a
model's own ``.to()`` (the task wrapper of a widely used image-classification trainer)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from test_runner_support import line_of, run_many, write
from test_trials_ladder import PAIR, _finding, _rec, _timed, ladder

from advisor import failures
from advisor.contracts import ContractError, check_run
from advisor.report.outcome import outcome_lines

AMP = "amp(dtype=bfloat16)"

# The task module of the issue's trainer, as its authors wrote it: it wraps the model and the
# loss, and its .to() probes torch.empty(0).to(*args, **kwargs) to keep device and dtype in
# sync. For channels_last the 1-D probe raises "required rank 4 tensor to use channels_last
# format". The script trains it through the task, as the trainer's loop does.
TASK = """
import torch
from torch import nn


class ClassificationTask(nn.Module):
    def __init__(self, model, criterion):
        super().__init__()
        self.model, self.criterion = model, criterion
        self.device, self.dtype = torch.device("cpu"), torch.float32

    def to(self, *args, **kwargs):
        dummy = torch.empty(0).to(*args, **kwargs)
        self.device, self.dtype = dummy.device, dummy.dtype
        return super().to(*args, **kwargs)

    def forward(self, x, y):
        return self.criterion(self.model(x), y)


def make_task():
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                        nn.Conv2d(8, 8, 3, padding=1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))
    return ClassificationTask(net, nn.CrossEntropyLoss())


if __name__ == "__main__":
    torch.manual_seed(0)
    task = make_task().to("cpu")
    opt = torch.optim.SGD(task.parameters(), lr=0.01)
    for it in range(STEPS):
        x, y = torch.randn(8, 3, 16, 16), torch.randint(0, 4, (8,))
        loss = task(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    convs = [m.weight for m in task.modules() if isinstance(m, nn.Conv2d)]
    print("weights channels_last:", all(w.is_contiguous(memory_format=torch.channels_last) for w in convs))
"""


def _task_module(tmp_path, steps: int = 60):
    path = write(tmp_path / "task.py", TASK.replace("STEPS", str(steps)))
    import importlib.util

    spec = importlib.util.spec_from_file_location("task_under_test", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return path, mod


# ----------------------------------------------------------------------------- conversions

def test_the_task_wrappers_own_to_raises_for_channels_last_as_in_the_issue(tmp_path):
    """The class as written: its own .to() cannot take a memory format (the reason the old
    conversion, ``model.to(memory_format=...)`` on the outermost module, failed the trial)."""
    _, mod = _task_module(tmp_path)
    with pytest.raises(RuntimeError, match="required rank 4 tensor to use channels_last format"):
        mod.make_task().to(memory_format=torch.channels_last)


def test_channels_last_converts_the_modules_that_own_the_weights_never_through_the_wrappers_to(tmp_path):
    from advisor.interventions import channels_last

    _, mod = _task_module(tmp_path)
    task = mod.make_task()
    params = {id(p) for p in task.parameters()}
    calls = []
    real_to = type(task).to
    type(task).to = lambda self, *a, **k: calls.append((a, k)) or real_to(self, *a, **k)
    try:
        assert channels_last.convert(task) == []
    finally:
        type(task).to = real_to
    assert calls == []   # the wrapper's own .to() never ran
    convs = [m.weight for m in task.modules() if isinstance(m, torch.nn.Conv2d)]
    assert convs and all(w.is_contiguous(memory_format=torch.channels_last) and not w.is_contiguous() for w in convs)
    assert {id(p) for p in task.parameters()} == params   # the optimizer's references stay valid
    assert task.device == torch.device("cpu") and task.dtype == torch.float32
    # it trains as it did
    loss = task(torch.randn(2, 3, 16, 16).contiguous(memory_format=torch.channels_last), torch.tensor([0, 1]))
    loss.backward()
    assert all(w.grad is not None for w in convs)


def test_a_conversion_whose_first_form_raises_is_done_by_its_second():
    """torch's Module.to on the owners runs their ``_apply``; a module that refuses it (its own
    _apply raises) is converted by replacing each 4-D tensor's data."""
    from advisor.interventions import channels_last

    class NoApply(torch.nn.Conv2d):
        def _apply(self, fn, recurse=True):
            raise RuntimeError("this module moves itself")

    model = torch.nn.Sequential(NoApply(3, 4, 3), torch.nn.ReLU())
    weight = model[0].weight
    assert channels_last.convert(model) == []
    assert model[0].weight is weight and weight.is_contiguous(memory_format=torch.channels_last)


def test_a_model_no_form_can_convert_refuses_with_every_forms_error():
    """Where neither form converts the weights (a sparse 4-D weight has no channels_last), the
    errors are returned, one a form: the trial then refuses the fix with them (skipped) instead
    of crashing the script."""
    from advisor.interventions import channels_last

    model = torch.nn.Conv2d(3, 2, 4)
    model.weight = torch.nn.Parameter(torch.randn(2, 3, 4, 4).to_sparse(), requires_grad=False)
    errors = channels_last.convert(model)
    assert [e.split(":")[0] for e in errors] == [label for label, _ in channels_last.FORMS]
    assert all("RuntimeError" in e for e in errors)


# ----------------------------------------------------------------------------- where it failed

def test_a_failure_inside_advisors_own_code_is_advisors_with_the_scripts_line_it_went_through(tmp_path):
    """The issue's failure as it was: advisor's code converted the task through its own .to(),
    whose probe raised. The failure is advisor's, placed at advisor's line, and names the
    script's line it went through."""
    from advisor.runner import tracebacks
    from advisor.runtime.patching import source_functions

    _, mod = _task_module(tmp_path)
    old = source_functions("import torch\n\n\ndef convert(module):\n"
                           "    return module.to(memory_format=torch.channels_last)\n", "channels-last as it was")
    try:
        old["convert"](mod.make_task())
    except RuntimeError as e:
        got = tracebacks.describe(e, cwd=str(tmp_path))
    assert got["kind"] == "advisor" and got["exception"] == "RuntimeError"
    assert got["message"] == "required rank 4 tensor to use channels_last format"
    assert got["where"] == "<advisor channels-last as it was>:5"
    assert got["script_where"] == f"task.py:{line_of(tmp_path / 'task.py', 'dummy = torch.empty(0)')}"
    assert got["script_line"] == "dummy = torch.empty(0).to(*args, **kwargs)"
    assert failures.line(got).startswith("advisor's bug at <advisor channels-last as it was>:5 (through the "
                                         "script's task.py:")


def test_out_of_memory_in_the_scripts_code_is_the_environments():
    from advisor.runner import tracebacks

    def step():
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

    try:
        step()
    except torch.OutOfMemoryError as e:
        got = tracebacks.describe(e, cwd=os.path.dirname(__file__))
    assert got["kind"] == "environment" and got["exception"] == "OutOfMemoryError"
    assert got["where"] == f"test_failures.py:{line_of(__file__, 'raise torch.OutOfMemoryError(')}"


def test_the_call_in_progress_is_read_from_the_line_where_python_records_no_position():
    """python 3.10 records no instruction position: the line's only call is the one in
    progress (a wrapper's ``return orig(*a, **k)``), and a line of several calls tells none."""
    import sys as _sys

    from advisor.runner.tracebacks import _call_in_progress

    def orig(*a):
        caller = _sys._getframe(1)
        return caller, caller.f_lineno

    frame, line = orig(1)   # this frame, at this line
    call = _call_in_progress(frame, line, None)
    assert call is not None and call.func.id == "orig"
    _, line = orig(orig(2))   # two calls on one line
    assert _call_in_progress(frame, line, None) is None


# The issue's research repository: run from src/, it appends to ../result/log_train.txt, which
# exists only where its authors run it. Here it does not: the script's own error, at its line.
LOGS = """
import sys
import torch
from torch.utils.data import DataLoader, Dataset


class Rows(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        if i == 40 and "--in-dataset" in sys.argv:
            open("../result/samples.txt").read()
        return torch.randn(4), torch.randn(1)


model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
workers = 2 if "--workers" in sys.argv else 0
for epoch in range(50):
    for it, (x, y) in enumerate(DataLoader(Rows(), batch_size=8, num_workers=workers)):
        if epoch == 1 and "--in-loop" in sys.argv:
            log = open("../result/log_train.txt", "a")
        loss = ((model(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


@pytest.fixture(scope="module")
def failed_runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("failures")
    script = write(tmp / "src" / "train.py", LOGS)
    jobs = {name: dict(script=script, argv=["train.py", *flags], cwd=str(tmp / "src"), run_dir=str(tmp / name))
            for name, flags in {"loop": ["--in-loop"], "dataset": ["--in-dataset"],
                                "worker": ["--in-dataset", "--workers"]}.items()}
    # advisor's own spec broken before the script's first line: its seed is no number
    jobs["before"] = dict(script=script, argv=["train.py"], cwd=str(tmp / "src"), run_dir=str(tmp / "before"),
                          seed="not-a-seed")
    done = run_many(jobs, tmp / "drivers", workers=2)
    return script, {name: res for name, (res, _o, _e) in done.items()}


@pytest.mark.parametrize("name, needle", [("loop", 'log = open("../result/log_train.txt", "a")'),
                                          ("dataset", 'open("../result/samples.txt").read()'),
                                          ("worker", 'open("../result/samples.txt").read()')])
def test_the_scripts_own_error_is_placed_at_its_line_through_advisors_wrappers(failed_runs, name, needle):
    """The observer's and the sandbox's wrappers of open() pass the call on: the error is the
    script's, at its own line, its source quoted; from a DataLoader worker too, whose traceback
    torch passes on as text."""
    script, runs = failed_runs
    res = runs[name]
    assert res["status"] == "incomplete"
    f = failures.of_process(res)
    assert f["kind"] == "script" and f["exception"] == "FileNotFoundError", f
    assert f["where"] == f"train.py:{line_of(script, needle)}" and f["line"] == needle
    assert "../result/" in f["message"]
    assert not any(t.startswith("advisor/") for t in f["traceback"]), f["traceback"]   # its wrappers left out
    assert f["traceback"][-1] == f"{f['where']}: {needle}"


def test_a_failure_before_the_scripts_first_line_is_advisors(failed_runs):
    _, runs = failed_runs
    f = failures.of_process(runs["before"])
    assert f["kind"] == "advisor", (f, runs["before"]["incomplete_reasons"])


# ----------------------------------------------------------------------------- bundles split

def _crash(exc: str = "RuntimeError", where: str = "train.py:9", kind: str = "script") -> dict:
    return {"status": "incomplete", "incomplete_reasons": [f"script raised {exc}: boom before the first step"],
            "exit": {"code": 1, "exception": f"{exc}: boom",
                     "failure": {"kind": kind, "exception": exc, "message": "boom", "where": where, "line": "x()"}},
            "step_times_ms": [], "losses": []}


def test_a_failed_pair_is_split_and_each_fix_trialled_alone_the_first_ranked_first(tmp_path):
    """The issue: channels-last+amp failed, then channels-last alone, and AMP, whose finding
    ranked first, was never trialled alone. Split, AMP runs alone first, then channels-last."""
    base = {**_timed(100.0), "config": {"parameters": {"value": {"conv_memory_format": "contiguous"}}}}
    speeds = {(): [100.0], (PAIR,): _crash(kind="advisor", where="advisor/interventions/channels_last.py:42"),
              (AMP,): [70.0], (AMP, "channels-last"): [69.5]}
    result, calls, lines = ladder(tmp_path, speeds, [_finding("amp", 50.0)], baseline=base)
    assert [c[0] for c in calls][:4] == ["00-baseline-repeat", "01-channels-last+amp", "02-amp", "03-channels-last"]
    pair = _rec(result, "01-")
    assert pair["status"] == "failed" and pair["failure"]["kind"] == "advisor"
    assert _rec(result, "02-")["status"] == "accepted" and _rec(result, "03-")["status"] == "rejected"
    assert any("failed: trying amp(dtype=bfloat16), channels-last alone" in line for line in lines)
    assert result["stack"] == [{"name": "amp", "params": {"dtype": "bfloat16"}}]


def test_a_failed_bundle_of_small_fixes_is_split_into_each_alone(tmp_path):
    bundle = "set-to-none + cudnn-benchmark + fused-optimizer"
    base = {**_timed(100.0), "config": {"optimizer": {"value": {"class": "SGD"}}}}
    speeds = {(): [100.0], (bundle,): _crash(), ("set-to-none",): [99.0], ("cudnn-benchmark",): _crash(),
              ("fused-optimizer",): [90.0]}
    # each worth more than the 3% a trial can be accepted on here: none is stopped early
    result, calls, _ = ladder(tmp_path, speeds, [_finding("set-to-none", 6.0), _finding("cudnn-benchmark", 5.0),
                                                 _finding("fused-optimizer", 4.0)], baseline=base)
    assert [c[0] for c in calls] == ["00-baseline-repeat", "01-set-to-none+cudnn-benchmark+fused-optimizer",
                                     "02-set-to-none", "03-cudnn-benchmark", "04-fused-optimizer"]
    # a member that failed alone too is not split again (it is one fix), and nothing loops
    assert [t["status"] for t in result["trials"][1:]] == ["failed", "rejected", "failed", "accepted"]
    assert result["stack"] == [{"name": "fused-optimizer", "params": {}}]


def test_a_pair_that_cannot_apply_runs_the_fix_that_can_alone():
    """rungs.pick, pure: a conv net in NCHW fed 3-D inputs (channels_last cannot apply): the
    pair is not recorded skipped as a whole; channels-last says why, and AMP runs alone."""
    from advisor.trials import rungs
    from advisor.trials.candidates import Candidate

    config = {"parameters": {"value": {"conv_memory_format": "contiguous"}},
              "input": {"value": {"shape": [8, 3, 16]}}}
    p = rungs.pick([Candidate("amp", {"dtype": "bfloat16"}, est_gain_ms=5.0)], set(), set(), config=config,
                   environment={"gpu_count": 1})
    assert p.rung is not None and p.rung.key == AMP and p.rung.alone
    assert [(c.key, why.split(";")[0]) for c, why in p.skipped] == \
        [("channels-last", "the model's input is 3-D")]


def test_a_fix_whose_run_time_part_raised_as_it_was_installed_fails_its_trial_as_advisors(tmp_path):
    """runner/session.py notes a fix whose apply raised and runs the script without it: timed,
    that run would be judged as the fix (rejected, near 0%). It failed, through advisor."""
    broken = {**_timed(99.0), "notes": ["intervention 'tf32' failed to apply: AttributeError: no backend"]}
    speeds = {(): [100.0], ("tf32",): broken}
    result, _, _ = ladder(tmp_path, speeds, [_finding("tf32", 20.0)])
    rec = _rec(result, "01-")
    assert rec["status"] == "failed" and rec["reason"] == "tf32 failed to apply: AttributeError: no backend"
    assert rec["failure"] == {"kind": "advisor", "exception": None, "message": rec["reason"]}
    assert result["stack"] == []


# ----------------------------------------------------------------------------- the summary

def _doc(trials: list[dict]) -> dict:
    return {"schema": 1, "status": "complete", "incomplete_reasons": [], "measurement": {}, "config": {},
            "environment": {}, "findings": [], "trials": trials}


def _failed(name: str, failure: dict) -> dict:
    return {"name": name, "fix": name[3:], "status": "failed", "reason": "script raised ...", "failure": failure}


LOG_ERROR = {"kind": "script", "exception": "FileNotFoundError", "where": "train.py:31",
             "line": "log = open('../result/log_train.txt', 'a')",
             "message": "[Errno 2] No such file or directory: '../result/log_train.txt'"}


def test_the_summary_counts_failed_trials_apart_and_never_says_none_was_faster():
    trials = [{"name": "00-baseline-repeat", "status": "failed", "failure": LOG_ERROR},
              *(_failed(f"0{i}-fix{i}", LOG_ERROR) for i in range(1, 8))]
    kept = outcome_lines(_doc(trials))[1]
    assert kept == ("kept: nothing: 8 trial(s) failed (8 through the script's error at train.py:31 "
                    "(FileNotFoundError): [Errno 2] No such file or directory: '../result/log_train.txt'; "
                    "0 through advisor)")
    assert "none was faster" not in kept
    # rejected and failed, each counted for what it is
    mixed = [*trials[:2], {"name": "02-amp", "status": "rejected", "reason": "-2%"}]
    assert outcome_lines(_doc(mixed))[1] == (
        "kept: nothing: 1 trial(s) measured, not faster beyond the noise; 2 trial(s) failed (2 through the "
        "script's error at train.py:31 (FileNotFoundError): [Errno 2] No such file or directory: "
        "'../result/log_train.txt'; 0 through advisor)")


def test_a_failure_through_advisor_is_flagged_as_advisors_bug_even_beside_a_kept_fix():
    ours = {"kind": "advisor", "exception": "RuntimeError", "where": "advisor/interventions/channels_last.py:42",
            "message": "required rank 4 tensor to use channels_last format"}
    trials = [{"name": "01-amp", "fix": "amp", "status": "accepted", "speedup_vs_baseline": 1.5},
              _failed("02-channels-last", ours)]
    kept = outcome_lines(_doc(trials))[1]
    assert kept.startswith("kept: amp (1.50x the baseline in the trials); 1 trial(s) failed (0 through the "
                           "script's error; 1 through advisor (advisor's bug: "
                           "advisor/interventions/channels_last.py:42 (RuntimeError)")


def test_the_report_headline_does_not_count_failed_trials_as_not_faster():
    from advisor.report.view import headline, ladder as rows_of

    trials = [{"name": "00-baseline-repeat", "status": "reference", "reason": "noise 2%"},
              _failed("01-amp", LOG_ERROR), {"name": "02-tf32", "status": "rejected", "reason": "-1%", "gain_vs_previous": -0.01}]
    doc = {**_doc(trials), "trial_summary": {"noise": 0.02, "threshold": 0.04}}
    verdict = headline(doc, rows_of(doc))["verdict"]
    assert "1 trial(s) ran and none cleared it" in verdict
    assert "1 trial(s) failed (1 through the script's error at train.py:31" in verdict


def test_the_html_report_names_each_failure_and_flags_advisors(tmp_path):
    from advisor.report import html as report_html

    ours = {"kind": "advisor", "exception": "RuntimeError", "where": "advisor/interventions/channels_last.py:42",
            "line": "module.to(memory_format=torch.channels_last)", "message": "required rank 4 tensor",
            "traceback": ["train.py:9: loss = task(x, y)", "advisor/interventions/channels_last.py:42: module.to()"]}
    doc = _doc([_failed("01-amp", LOG_ERROR), _failed("02-channels-last", ours)])
    page = report_html.render_html(doc, tmp_path)
    assert "the script&#39;s error at train.py:31: log = open(&#39;../result/log_train.txt&#39;, &#39;a&#39;)" in page
    assert "<b>advisor&#39;s bug at advisor/interventions/channels_last.py:42: module.to(memory_format=" in page
    assert "please report it" in page and "RuntimeError: required rank 4 tensor</pre>" in page
    assert "No fix was kept: 2 trial(s) failed (1 through the script&#39;s error at train.py:31" in page


def test_the_run_contract_names_a_failure_without_a_kind():
    check_run(_doc([_failed("01-amp", LOG_ERROR)]))
    with pytest.raises(ContractError, match="failure"):
        check_run(_doc([_failed("01-amp", {"where": "train.py:3"})]))


# ----------------------------------------------------------------------------- end to end

def test_channels_last_on_the_task_wrapper_applies_in_a_trial_process(tmp_path):
    """A real trial process of channels-last on the wrapped model: it completes, and the
    weights the optimizer trains are channels_last (the fix's own check reads it)."""
    from advisor import fixes

    script, _ = _task_module(tmp_path, steps=400)
    jobs = {"trial": dict(script=script, argv=["task.py"], cwd=str(tmp_path), run_dir=str(tmp_path / "trial"),
                          interventions=[{"name": "channels-last", "params": {}}])}
    res = run_many(jobs, tmp_path / "drivers", workers=1)["trial"][0]
    assert res["status"] == "complete", res["incomplete_reasons"]
    took, expected, observed = fixes.get("channels-last").check(res["config"], {}, {})
    assert took is True, (expected, observed)


def test_the_patch_converts_the_task_wrapper_so_that_it_runs_as_plain_python(tmp_path):
    """fixes.patch for channels-last on the wrapped model, from the baseline's observed config:
    the wrapper's class has its own .to(), so the patch calls torch's Module.to on it; the
    patched script runs as plain python and trains with channels_last weights."""
    from advisor.fixes import make_patch

    script, _ = _task_module(tmp_path, steps=400)
    jobs = {"baseline": dict(script=script, argv=["task.py"], cwd=str(tmp_path), run_dir=str(tmp_path / "base"))}
    base = run_many(jobs, tmp_path / "drivers", workers=1)["baseline"][0]
    assert base["status"] == "complete", base["incomplete_reasons"]
    assert base["config"]["model"]["value"]["own_to"].endswith("ClassificationTask.to")
    diff, notes = make_patch(script, [{"intervention": "channels-last", "params": {}}], base["config"],
                             root=str(tmp_path))
    note = next(n for n in notes if n["intervention"] == "channels-last")
    assert note["applied"], note
    assert "task = torch.nn.Module.to(task, memory_format=torch.channels_last)" in diff
    assert "own .to()" in note["why"]
    (tmp_path / "fixes.patch").write_text(diff)
    subprocess.run(["git", "apply", "fixes.patch"], cwd=tmp_path, check=True, capture_output=True)
    plain = subprocess.run([sys.executable, "task.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert "weights channels_last: True" in plain.stdout


def test_a_model_without_its_own_to_keeps_the_usual_form(tmp_path):
    from advisor.patch.model_fixes import conversion

    class Ctx:
        config = {"model": {"value": {"class": "Net"}}}

    assert conversion(Ctx(), "model") == "model = model.to(memory_format=torch.channels_last)"


def test_an_analyze_whose_trials_fail_by_the_scripts_error_says_so(tmp_path):
    """A real analyze of a script that fails when run a second time (it consumes its input file,
    deleting it): the baseline deleted it, so the repeat and every trial fail at that line.
    run.json names each failure; the summary counts them as failed, by the script's error, and
    does not say that none was faster. (A directory the baseline made is absent for the trials:
    runner/created.py; a file it deleted is gone for real.)"""
    (tmp_path / "inputs.txt").write_text("512")
    write(tmp_path / "train.py", """
        import os
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        n = int(open("inputs.txt").read()); os.remove("inputs.txt")
        data = TensorDataset(torch.randn(n, 16), torch.randn(n, 1))
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for epoch in range(40):
            for x, y in DataLoader(data, batch_size=16):
                loss = torch.nn.functional.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
    """)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=repo + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "advisor", "analyze", "--out", str(tmp_path / "run"), "--warmup", "2",
                        "--steps", "4", "--profile-steps", "2", "--fix", "dataloader-workers", "--no-verify", "train.py"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads((tmp_path / "run" / "run.json").read_text())
    failed = [t for t in doc["trials"] if t["status"] == "failed"]
    assert failed, [(t["name"], t["status"]) for t in doc["trials"]]
    for t in failed:
        assert t["failure"]["kind"] == "script" and t["failure"]["exception"] == "FileNotFoundError", t
        assert t["failure"]["where"] == "train.py:5" and \
            t["failure"]["line"] == 'n = int(open("inputs.txt").read()); os.remove("inputs.txt")'
    assert len(failed) >= 2 and failed[0]["name"] == "00-baseline-repeat"   # the repeat, and the trials
    summary = " ".join((r.stderr + r.stdout).split())   # as the terminal wrapped it, unwrapped
    assert f"kept: nothing: {len(failed)} trial(s) failed ({len(failed)} through the script's error at train.py:5 " \
           "(FileNotFoundError): [Errno 2] No such file or directory: 'inputs.txt'; 0 through advisor)" in summary
    assert "none was faster" not in summary


def test_a_scripts_error_at_a_line_the_baseline_ran_is_named_under_the_fix(tmp_path):
    """dcgan.py on an H200: channels-last+amp failed at the script's own `out.view(...)`, a line
    the baseline ran: the fix gave it a channels-last tensor. The failure stays the script's
    kind, and says it was under the fix; a line the baseline never reached says nothing more."""
    base = {**_timed(100.0), "config": {"parameters": {"value": {"conv_memory_format": "contiguous"}}},
            "executed_lines": {"train.py": [1, 2, 9]}}
    speeds = {(): [100.0], (PAIR,): _crash(where="train.py:9"), (AMP,): _crash(where="train.py:12"),
              ("channels-last",): [99.0]}
    result, _, _ = ladder(tmp_path, speeds, [_finding("amp", 50.0)], baseline=base)
    pair, amp = _rec(result, "01-"), _rec(result, "02-")
    assert pair["failure"]["kind"] == "script" and pair["failure"]["under"] == ["channels-last", "amp(dtype=bfloat16)"]
    assert failures.line(pair["failure"]) == (
        "the script's error under channels-last+amp(dtype=bfloat16) at train.py:9: x() (the baseline ran that "
        "line: the fix changes what it is given)")
    assert "under" not in amp["failure"] and failures.line(amp["failure"]) == "the script's error at train.py:12: x()"
    assert "through the script's error under channels-last+amp(dtype=bfloat16) (a line the baseline ran) at " \
           "train.py:9 (RuntimeError)" in failures.words(result["trials"])
