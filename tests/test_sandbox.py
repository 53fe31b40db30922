"""Trials never write into the user's files: the script's checkpoint and output writes land in
the trial's run directory instead (spec sandbox_writes, as trials.py sets it)."""

from __future__ import annotations


from test_runner_support import write

from advisor.runner.parent import run_child


def test_trial_writes_are_redirected(tmp_path, capfd):
    proj = tmp_path / "proj"
    (proj / "ckpt").mkdir(parents=True)
    (proj / "ckpt" / "model.pt").write_bytes(b"the user's checkpoint")
    script = write(proj / "train.py", """
        import os, pathlib, torch
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for i in range(100):
            model(torch.randn(4, 2)).sum().backward()
            opt.step(); opt.zero_grad()
            torch.save(model.state_dict(), "ckpt/model.pt")
            with open("log.txt", "a") as f:
                f.write(f"step {i}\\n")
            os.makedirs("out/deep", exist_ok=True)
            pathlib.Path("out/deep/x.txt").write_text("x")
        with open("log.txt") as f:  # reading back what it wrote still works
            print("lines", len(f.readlines()))
    """)
    run = tmp_path / "run"
    spec = {"script": str(script), "argv": ["train.py"], "cwd": str(proj), "run_dir": str(run),
            "run_name": "01-trial", "warmup_steps": 1, "profile_steps": 1, "measure_steps": 2,
            "record_memory": False, "with_stack": False, "interventions": [], "sandbox_writes": True,
            "tb_dir": str(tmp_path / "tb"), "seed": 0}
    res = run_child(spec, timeout=120, step_timeout=60)
    assert res["status"] == "complete", res["incomplete_reasons"]
    assert (proj / "ckpt" / "model.pt").read_bytes() == b"the user's checkpoint"
    assert not (proj / "log.txt").exists() and not (proj / "out").exists()
    outputs = run / "outputs" / str(proj.resolve()).lstrip("/")
    assert (outputs / "ckpt" / "model.pt").stat().st_size > 0
    assert (outputs / "log.txt").read_text().startswith("step 0")
    assert (outputs / "out" / "deep" / "x.txt").read_text() == "x"
    assert list((tmp_path / "tb" / "01-trial").glob("*.pt.trace.json.gz"))  # advisor's own trace
    notes = [n for n in res["notes"] if n.startswith("trial write redirected")]
    assert len(notes) == 4  # one per path, not per write
