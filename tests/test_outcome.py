"""The lines that always end an analyze (advisor.report.outcome): findings and skipped rules,
what was kept or why nothing was, the patch or why there is none, the command to run."""

from __future__ import annotations

from advisor.report.outcome import outcome_lines

CPU_SKIPS = [{"code": f"ADV1{i:02d}", "reason": "the trace has no GPU activity"} for i in range(12)] + \
    [{"code": "ADV116", "reason": "traces of several ranks are needed"}]


def test_a_cpu_run_that_found_nothing_says_so_and_why():
    doc = {"findings": [], "skipped_rules": CPU_SKIPS, "trials": [
        {"name": "00-baseline-repeat", "status": "reference"}, {"name": "ceiling-data-free", "status": "bound",
                                                                 "apart": True}]}
    assert outcome_lines(doc) == [
        "findings: none; 13 rule(s) skipped (12 the trace has no GPU activity; traces of several ranks are needed)",
        "kept: nothing: no finding proposed a fix advisor can trial here",
        "patch: none (no fix was kept)"]


def test_fixes_left_unrun_by_the_budget_are_not_said_to_be_missing():
    """timm's trainer on an H200 at a 100 s budget: its 36 s cold start left room for the
    repeat alone; the proposed fixes were never started, which is the budget's doing."""
    doc = {"findings": [{"severity": "warning"}], "trials": [
        {"name": "00-baseline-repeat", "status": "reference"},
        {"name": "channels-last + amp(dtype=bfloat16)", "status": "not run", "reason": "trial budget spent"},
        {"name": "pin-memory(pin_memory=True)", "status": "not run", "reason": "trial budget spent"},
        {"name": "ceiling-data-free", "status": "not run", "reason": "trial budget spent", "ceiling": True,
         "apart": True}]}
    assert outcome_lines(doc)[1] == (
        "kept: nothing: 2 proposed fix trial(s) not run, the trial budget spent (channels-last + "
        "amp(dtype=bfloat16), pin-memory(pin_memory=True)): a larger --budget gives them room")


def test_kept_fixes_the_patch_its_status_and_the_command_alone_on_its_line():
    doc = {"findings": [{"severity": "error"}, {"severity": "warning"}, {"severity": "warning"}],
           "run_dir": "reports/r1",
           "trials": [{"name": "01-dataloader-workers-8", "fix": "dataloader-workers", "status": "accepted",
                       "speedup_vs_baseline": 3.5},
                      {"name": "02-amp", "fix": "amp", "status": "rejected"}],
           "patch": {"file": "fixes.patch", "command": ["python", "my train.py", "--workers", "8"],
                     "notes": [{"intervention": "dataloader-workers", "applied": True}],
                     "verification": {"status": "verified"}}}
    assert outcome_lines(doc) == [
        "findings: 3 (2 warning, 1 error)",
        "kept: dataloader-workers (3.50x the baseline in the trials)",
        "patch: reports/r1/fixes.patch (dataloader-workers), verified as plain python",
        "run: python 'my train.py' --workers 8"]


def test_a_patch_that_only_changes_the_command_line_says_so():
    doc = {"findings": [{"severity": "error"}], "trials": [{"fix": "dataloader-workers", "status": "accepted"}],
           "patch": {"file": None, "command": ["python", "t.py", "--workers", "8"],
                     "notes": [{"intervention": "dataloader-workers", "applied": True,
                                "argv_changes": [{"flag": "--workers", "from": "1", "to": "8"}]}],
                     "verification": {"status": "partial"}}}
    lines = outcome_lines(doc)
    assert lines[2] == ("patch: no code change; the command below changes what your command line sets "
                        "(dataloader-workers), partial as plain python")
    assert lines[3] == "run: python t.py --workers 8"


def test_trials_that_ran_and_kept_nothing():
    doc = {"findings": [{"severity": "warning"}], "trials": [{"name": "01-amp", "status": "rejected"}]}
    assert outcome_lines(doc)[1] == "kept: nothing: 1 trial(s) ran and none was faster beyond the noise"


def test_an_apply_run_without_trials_is_not_called_diagnosis_only_beside_its_verified_patch():
    """--apply on a CPU had read "Diagnosis only: no trials ran", "no fix kept" and "verified as
    plain python: 3.29x" on one page. The headline now says what ran."""
    from advisor.report import view

    doc = {"applied": ["dataloader-workers(num_workers=2)"], "trials": [], "findings": [],
           "measurement": {"samples_per_s": 100.0, "step_time_ms": 80.0},
           "patch": {"file": "fixes.patch", "verification": {"status": "verified"}}}
    head = view.headline(doc, view.ladder(doc))
    assert head["verdict"].startswith("Measured with the fixes you applied (--apply dataloader-workers(num_workers=2))")
    assert "verified as plain python" in head["verdict"] and "Diagnosis only" not in head["verdict"]
    assert head["applied"] is True
    assert outcome_lines(doc)[1] == "kept: the fixes you applied (--apply dataloader-workers(num_workers=2))"
