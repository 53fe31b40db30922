"""Trials never write into the user's files: the script's checkpoint and output writes land in
the trial's run directory instead (spec sandbox_writes, as trials.py sets it)."""

from __future__ import annotations

from test_runner_support import write

from advisor.runner.parent import run_child


def _trial(script, proj, tmp_path, profile_steps: int) -> dict:
    """A sandboxed trial's spec for the script in `proj`, run directory tmp_path/run."""
    return {"script": str(script), "argv": ["train.py"], "cwd": str(proj), "run_dir": str(tmp_path / "run"),
            "run_name": "01-trial", "warmup_steps": 1, "profile_steps": profile_steps, "measure_steps": 2,
            "record_memory": False, "with_stack": False, "interventions": [], "sandbox_writes": True,
            "tb_dir": str(tmp_path / "tb"), "seed": 0}


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
    spec = _trial(script, proj, tmp_path, profile_steps=1)
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


def test_library_caches_are_let_through_and_every_other_write_is_redirected_whoever_calls(tmp_path, capfd,
                                                                                             monkeypatch):
    """torch.compile's caches (~/.triton on a GPU) are written by installed libraries:
    redirecting part of them broke compilation in a real H100 trial, so they stay real. Every
    other write is redirected whoever makes it: the user's own code, a helper module outside
    the project, and installed libraries writing the user's outputs (pandas' to_csv, PIL's save,
    TensorBoard's event writer, safetensors' native writer, os.open)."""
    monkeypatch.setenv("TMPDIR", str(tmp_path / "systmp"))  # so that home/ is outside scratch
    (tmp_path / "systmp").mkdir()
    home, lib, proj = tmp_path / "home", tmp_path / "lib", tmp_path / "proj"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(home / "inductor"))
    write(lib / "userlib.py", """
        def log(path):
            with open(path, "w") as f:
                f.write("the user's helper")
    """)
    script = write(proj / "train.py", f"""
        import os, sys, torch
        import pandas as pd
        from PIL import Image
        from safetensors.torch import save_file
        from torch.utils.tensorboard import SummaryWriter
        sys.path.insert(0, {str(lib)!r})
        import userlib
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
        model.compile()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        writer = SummaryWriter({str(home / "runs")!r})
        for i in range(100):
            loss = model(torch.randn(4, 8)).sum()
            loss.backward()
            opt.step(); opt.zero_grad()
            writer.add_scalar("loss", loss.item(), i)
            userlib.log({str(home / "helper.txt")!r})
            with open({str(home / "mine.txt")!r}, "w") as f:
                f.write("the script's own output")
            pd.DataFrame({{"step": [i]}}).to_csv({str(home / "log.csv")!r})
            Image.new("RGB", (4, 4)).save({str(home / "sample.png")!r})
            save_file({{"w": torch.zeros(2)}}, {str(home / "model.safetensors")!r})
            fd = os.open({str(home / "raw.bin")!r}, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.write(fd, b"raw"); os.close(fd)
    """)
    spec = _trial(script, proj, tmp_path, profile_steps=0)
    res = run_child(spec, timeout=300, step_timeout=240)
    assert res["status"] == "complete", (res["incomplete_reasons"], res["notes"])
    assert any((home / "inductor").rglob("*")), "inductor's cache stays where torch put it"
    written = ["mine.txt", "helper.txt", "log.csv", "sample.png", "model.safetensors", "raw.bin", "runs"]
    assert not [n for n in written if (home / n).exists()], "nothing reached the user's real files"
    outputs = tmp_path / "run" / "outputs" / str(home.resolve()).lstrip("/")
    assert [n for n in written if (outputs / n).exists()] == written
    assert list((outputs / "runs").glob("events.out.tfevents.*"))
    notes = [n for n in res["notes"] if n.startswith("trial write redirected") and str(home) in n]
    assert len([n for n in notes if "inductor" in n]) == 0


def test_a_dataloader_workers_writes_are_redirected_too(tmp_path, capfd):
    """A forked DataLoader worker drops advisor's hooks (it is not the run), but not the
    sandbox: the observer's open, undone at the fork, had been wrapped by the sandbox's, and
    undoing it put the real open back in the worker (a dataset caching its decoded samples
    wrote into the user's project)."""
    proj = tmp_path / "proj"
    proj.mkdir()
    script = write(proj / "train.py", """
        import os, torch
        class Caching(torch.utils.data.Dataset):
            def __len__(self): return 64
            def __getitem__(self, i):
                with open(f"cache-{os.getpid()}.txt", "a") as f:   # in the worker process
                    f.write(f"{i}\\n")
                return torch.randn(4)
        loader = torch.utils.data.DataLoader(Caching(), batch_size=8, num_workers=1)
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(100):
            for x in loader:
                model(x).sum().backward(); opt.step(); opt.zero_grad()
    """)
    run = tmp_path / "run"
    spec = _trial(script, proj, tmp_path, profile_steps=0)
    res = run_child(spec, timeout=120, step_timeout=60)
    assert res["status"] == "complete", res["incomplete_reasons"]
    assert sorted(p.name for p in proj.iterdir()) == ["train.py"]
    outputs = run / "outputs" / str(proj.resolve()).lstrip("/")
    assert list(outputs.glob("cache-*.txt"))


def test_a_spawned_workers_writes_are_redirected_and_it_reads_the_patched_source(tmp_path, capfd):
    """A worker multiprocessing starts with ``spawn`` is a fresh interpreter, not a fork: the
    sandbox is installed in it before it imports the script again, and where the process reads
    patched copies in place of the user's files (the verification's ``sources``), so does it."""
    proj = tmp_path / "proj"
    proj.mkdir()
    body = """
        import os, torch
        TAG = "{tag}"
        class Caching(torch.utils.data.Dataset):
            def __len__(self): return 32
            def __getitem__(self, i):
                with open(f"cache-{{TAG}}-{{os.getpid()}}.txt", "a") as f:   # in the spawned worker
                    f.write(f"{{i}}\\n")
                return torch.randn(4)
        if __name__ == "__main__":
            loader = torch.utils.data.DataLoader(Caching(), batch_size=8, num_workers=1,
                                                 multiprocessing_context="spawn", persistent_workers=True)
            model = torch.nn.Linear(4, 1)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(1000):
                for x in loader:
                    model(x).sum().backward(); opt.step(); opt.zero_grad()
    """
    script = write(proj / "train.py", body.format(tag="original"))
    patched = write(tmp_path / "run" / "tree" / "train.py", body.format(tag="patched"))
    run = tmp_path / "run"
    spec = {**_trial(script, proj, tmp_path, profile_steps=0), "sources": {str(script): str(patched)}}
    res = run_child(spec, timeout=240, step_timeout=180)
    assert res["status"] == "complete", res["incomplete_reasons"]
    assert sorted(p.name for p in proj.iterdir()) == ["train.py"]
    outputs = run / "outputs" / str(proj.resolve()).lstrip("/")
    assert list(outputs.glob("cache-patched-*.txt")) and not list(outputs.glob("cache-original-*"))


def test_with_the_hooks_alone_a_write_past_them_is_listed(tmp_path, capfd):
    """Native code and subprocesses write past the Python hooks: with no copy-on-write view, what
    changed in the user's tree while the process ran is listed (child.json sandbox.unredirected)."""
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "untouched.txt").write_text("old")
    script = write(proj / "train.py", """
        import subprocess, torch
        subprocess.run(["sh", "-c", "echo native > native.txt"], check=True)   # past the hooks
        with open("python.txt", "w") as f:                                   # redirected
            f.write("python")
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for i in range(100):
            model(torch.randn(4, 2)).sum().backward()
            opt.step(); opt.zero_grad()
    """)
    res = run_child(_trial(script, proj, tmp_path, profile_steps=0), timeout=120, step_timeout=60)
    assert res["status"] == "complete", res["incomplete_reasons"]
    assert res["sandbox"]["kind"] == "python"
    assert res["sandbox"]["unredirected"] == [str((proj / "native.txt").resolve())]
    assert not (proj / "python.txt").exists()


def test_the_scripts_own_error_inside_a_hooked_call_shows_the_scripts_traceback(tmp_path, capfd):
    """os.mkdir of a directory that exists raises in the sandbox's hook, where the real call it
    passes on raised: the script's error, printed with the script's frames alone."""
    proj = tmp_path / "proj"
    (proj / "out").mkdir(parents=True)
    script = write(proj / "train.py", """
        import os
        os.mkdir("out")
    """)
    res = run_child(_trial(script, proj, tmp_path, profile_steps=0), timeout=120, step_timeout=60)
    err = capfd.readouterr().err
    assert "FileExistsError" in err and 'train.py", line 2' in err
    assert "sandbox_hooks.py" not in err, err
    assert res["exit"]["failure"]["kind"] == "script"
