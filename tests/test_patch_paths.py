"""fixes.patch on the path that runs, with the user's knobs alive, verified as plain python.

A real CPU run of a research-code layout (tests/fixtures/scripts/trainer_layout: a Trainer
class whose model is wrapped for DDP only under ``if dist.is_initialized()``, a loader made in
a helper module from a YAML section) with forced fixes: the patch must put the model edits
after the statement that ran, keep autocast to the forward and the loss, change
``num_data_workers`` in the YAML section the command line chose, and the patched copy, run
as plain python by advisor itself, must show every edit taking effect.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from advisor import verify
from advisor.fixes import make_patch
from advisor.report import verification
from advisor.runner._util import mirror_tree

ROOT = Path(__file__).resolve().parents[1]
LAYOUT = ROOT / "tests" / "fixtures" / "scripts" / "trainer_layout"
FORCED = "channels-last,amp,set-to-none,dataloader-workers:num_workers=2"


def _digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


@pytest.fixture(scope="module")
def layout_run(tmp_path_factory):
    """advisor analyze --apply ... --no-trials on a copy of the layout, run from another cwd."""
    tmp = tmp_path_factory.mktemp("layout")
    src = tmp / "project"
    shutil.copytree(LAYOUT, src)
    before = _digest(src)
    cwd = tmp / "cwd"
    cwd.mkdir()
    out = tmp / "run"
    proc = subprocess.run([sys.executable, "-m", "advisor", "analyze", "--no-trials", "--apply", FORCED,
                           "--steps", "8", "--min-time", "0", "--out", str(out), str(src / "train.py"),
                           "--config", "short", "--epochs", "4"],
                          cwd=cwd, capture_output=True, text=True, timeout=600)
    return {"proc": proc, "out": out, "src": src, "before": before,
            "doc": json.loads((out / "run.json").read_text())}


def test_patch_edits_the_statements_that_ran(layout_run):
    proc, out = layout_run["proc"], layout_run["out"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    diff = (out / "fixes.patch").read_text()
    lines = diff.splitlines()
    # channels_last right after the model's placement, not inside the DDP branch after it
    i = lines.index("+        self.model = self.model.to(memory_format=torch.channels_last)")
    assert lines[i - 1].strip() == "self.model = Net().to(self.device)"
    assert lines[i + 1].strip().startswith("if dist.is_available()")
    # autocast around the forward and the loss only: the .item() read stays outside
    w = next(k for k, ln in enumerate(lines) if "with torch.autocast(" in ln)
    block = lines[w + 1:w + 3]
    assert [b.strip("+ ") for b in block] == ["gen = self.model(inp)", "loss = self.loss_obj(gen, tar)"]
    assert "+                tr_loss += loss.item()" not in lines
    # the knob: the YAML section the command line chose, the expression kept at the call
    assert "+  num_data_workers: 2" in lines and "-  num_data_workers: 0" in lines
    hunk = diff[diff.index("+++ b/config/train.yaml"):]
    assert "short:" in hunk
    assert "num_workers=params.num_data_workers," in diff
    for rel in layout_run["doc"]["patch"]["notes"]:
        assert rel["applied"], rel


def test_patch_verified_as_plain_python(layout_run):
    v = layout_run["doc"]["patch"]["verification"]
    assert v["runs"] >= 1 and v["samples_per_s"] > 0 and v["status"] in ("verified", "short")
    assert v["loss_finite"]
    assert {c["fix"]: c["took_effect"] for c in v["checks"]} == {
        "channels-last": True, "amp": True, "set-to-none": True, "dataloader-workers": True}
    assert "verified as plain python" in layout_run["proc"].stderr or "falls short" in layout_run["proc"].stderr
    # the user's files were never written; the patched copies live in the run directory, one per
    # file the patch edits, at its path relative to the patch's root
    assert _digest(layout_run["src"]) == layout_run["before"]
    tree = layout_run["out"] / v["tree"]
    assert "num_data_workers: 2" in (tree / "config" / "train.yaml").read_text()
    patched = re.findall(r"^\+\+\+ b/(.+)$", (layout_run["out"] / "fixes.patch").read_text(), re.M)
    assert sorted(str(p.relative_to(tree)) for p in tree.rglob("*") if p.is_file()) == sorted(patched)
    html = (layout_run["out"] / "index.html").read_text()
    assert 'id="verification"' in html and "as plain python" in html


def test_executed_lines_and_model_placement_are_recorded(layout_run):
    doc = layout_run["doc"]
    model = doc["config"]["model"]
    assert model["value"]["class"] == "Net"
    assert model["where"].endswith("train.py:27") and model["stack"][0] == model["where"]
    ran = {Path(k).name: set(v) for k, v in doc["executed_lines"].items()}
    assert 27 in ran["train.py"] and 29 not in ran["train.py"]   # the DDP wrap did not run
    assert 7 in ran["data.py"]
    assert not any("torch" in k.split(os.sep)[0] for k in doc["executed_lines"])


# ----------------------------------------------------------------------------- without a run

def _project(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text).lstrip())
    return tmp_path


MNIST_LAYOUT = """
import argparse
import torch
from torch.utils.data import DataLoader, TensorDataset


def train(args, model, device, train_loader, optimizer):
    for data, target in train_loader:
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = torch.nn.functional.cross_entropy(output, target)
        loss.backward()
        optimizer.step()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    device = torch.device("cpu")
    train_kwargs = {"batch_size": args.batch_size}
    cuda_kwargs = {"num_workers": 1, "pin_memory": True, "shuffle": True}
    train_kwargs.update(cuda_kwargs)
    ds = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    train_loader = DataLoader(ds, **train_kwargs)
    model = torch.nn.Linear(4, 2).to(device)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
    train(args, model, device, train_loader, optimizer)


if __name__ == "__main__":
    main()
"""


def test_model_defined_after_the_loop_function_and_loader_kwargs_dict(tmp_path):
    """pytorch/examples' layout: train() above main(), the model bound in main() below the
    forward's call site, the DataLoader's workers in a **kwargs dict."""
    root = _project(tmp_path, {"main.py": MNIST_LAYOUT})
    # a GPU run (its device observed): the workers fix pins, as its trial did
    config = {"parameters": {"value": {"device": "cuda:0"}, "where": "main.py:10"},
              "input": {"value": {}, "where": "main.py:10"},
              "model": {"value": {"class": "Linear"}, "where": "main.py:26", "stack": ["main.py:26", "main.py:32"]},
              "dataloader": {"value": {"num_workers": 1, "pin_memory": True}, "where": "main.py:25"}}
    diff, notes = make_patch(str(root / "main.py"), [
        {"intervention": "torch-compile", "params": {}},
        {"intervention": "dataloader-workers", "params": {"num_workers": 4}}], config, cwd=str(root))
    assert all(n["applied"] for n in notes), notes
    assert "+    model.compile()" in diff.splitlines()
    # the workers, and the two arguments that need workers, in the dict the loader unpacks:
    # never twice through **kwargs, and nothing that raises where that dict is not used
    assert ('+    cuda_kwargs = {"num_workers": 4, "pin_memory": True, "shuffle": True, '
            '"prefetch_factor": 4}') in diff.splitlines()
    assert "train_loader = DataLoader(ds, **train_kwargs)" in diff and "+    train_loader" not in diff
    ast.parse(verify_text(root, diff, "main.py"))


def verify_text(root: Path, diff: str, rel: str) -> str:
    tree = root.parent / (root.name + "-tree")
    mirror_tree(str(root), str(tree), [rel])
    assert verify.apply_patch(diff, str(tree), {}) is None
    return (tree / rel).read_text()


def test_a_binding_in_a_branch_that_did_not_run_is_never_the_anchor(tmp_path):
    src = """
    import torch
    model = torch.nn.Linear(4, 2)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        model = torch.nn.parallel.DistributedDataParallel(model)
    for x in [torch.randn(2, 4)]:
        out = model(x)
        loss = out.sum()
        print(loss.item())
        loss.backward()
    """
    root = _project(tmp_path, {"t.py": src})
    config = {"parameters": {"value": {}, "where": "t.py:6"}, "input": {"value": {}, "where": "t.py:6"}}
    ran = {"t.py": [1, 2, 3, 5, 6, 7, 8, 9]}
    diff, _ = make_patch(str(root / "t.py"), [{"intervention": "torch-compile", "params": {}},
                                              {"intervention": "amp", "params": {}}],
                         config, cwd=str(root), executed=ran)
    lines = diff.splitlines()
    k = lines.index("+model.compile()")
    assert lines[k - 1] == " model = torch.nn.Linear(4, 2)"
    w = next(i for i, ln in enumerate(lines) if "torch.autocast(" in ln)
    assert [ln.strip("+ ") for ln in lines[w + 1:w + 3]] == ["out = model(x)", "loss = out.sum()"]
    assert " " * 4 + "print(loss.item())" in " ".join(lines)
    assert "+        print(loss.item())" not in lines
    # without the executed lines (an older run), the last binding lexically would be taken
    diff_old, _ = make_patch(str(root / "t.py"), [{"intervention": "torch-compile", "params": {}}],
                             config, cwd=str(root))
    assert "+    model.compile()" in diff_old.splitlines()


def test_a_flag_the_command_line_passes_is_changed_there(tmp_path):
    src = """
    import argparse
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    p = argparse.ArgumentParser()
    p.add_argument("-j", "--workers", type=int, default=4)
    args = p.parse_args()
    loader = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=2, num_workers=args.workers)
    """
    root = _project(tmp_path, {"t.py": src})
    config = {"dataloader": {"value": {"num_workers": 0}, "where": "t.py:7"},
              "parameters": {"value": {"device": "cuda:0"}, "where": None}}   # a GPU run: its trial pinned
    fix = [{"intervention": "dataloader-workers", "params": {"num_workers": 8, "pin_memory": True}}]
    diff, notes = make_patch(str(root / "t.py"), fix, config, cwd=str(root), argv=["-j", "0", "--epochs", "1"])
    assert notes[0]["argv_changes"] == [{"flag": "-j", "from": "0", "to": "8"}]
    assert "default=4" in diff and "default=8" not in diff
    assert verify.argv_with_changes(["-j", "0", "--epochs", "1"], notes) == ["-j", "8", "--epochs", "1"]
    diff2, notes2 = make_patch(str(root / "t.py"), fix, config, cwd=str(root), argv=[])
    assert '+p.add_argument("-j", "--workers", type=int, default=8)' in diff2.splitlines()
    assert "num_workers=args.workers" in diff2 and "prefetch_factor=4 if args.workers > 0 else None" in diff2
    assert "persistent_workers" not in diff2    # pinned: workers beside a pinning thread hang the exit


def test_a_value_with_no_source_found_is_kept_and_named(tmp_path):
    src = """
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    def make(n):
        return DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=2, num_workers=n)
    """
    root = _project(tmp_path, {"t.py": src})
    config = {"dataloader": {"value": {"num_workers": 0}, "where": "t.py:4"}}
    diff, notes = make_patch(str(root / "t.py"), [{"intervention": "dataloader-workers",
                                                   "params": {"num_workers": 8, "pin_memory": False}}],
                             config, cwd=str(root))
    assert "comes from `n`" in notes[0].get("reason", "") + notes[0].get("warning", "")
    assert "num_workers=8" not in diff


def test_a_loader_that_already_pins_is_left_pinning_as_it_does(tmp_path):
    src = """
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    loader = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=2, num_workers=2,
                        pin_memory=torch.cuda.is_available())
    """
    root = _project(tmp_path, {"t.py": src})
    config = {"dataloader": {"value": {"num_workers": 2, "pin_memory": True}, "where": "t.py:3"}}
    diff, notes = make_patch(str(root / "t.py"), [{"intervention": "dataloader-workers",
                                                   "params": {"num_workers": 8}}], config, cwd=str(root))
    assert "pin_memory=torch.cuda.is_available()" in diff and "pin_memory=True" not in diff
    assert "num_workers=8" in diff and "warning" not in notes[0] or "pin_memory" not in notes[0]["warning"]


def test_the_scripts_own_switches_are_turned_on_where_it_keeps_them(tmp_path):
    """A research script with `if params.channels_last:` and `if params.enable_amp: ... else:`
    switches read from a YAML section: the patch turns them on there (and sets the autocast
    dtype the trials measured) instead of adding a second conversion or autocast beside them."""
    train = """
    import torch
    from params import load
    params = load()
    model = torch.nn.Conv2d(3, 8, 3).to("cpu")
    if params.channels_last:
        model = model.to(memory_format=torch.channels_last)
    amp_dtype = {"float16": torch.float16, "bfloat16": torch.bfloat16}[params.amp_dtype]
    for x in [torch.randn(2, 3, 8, 8)]:
        if params.enable_amp:
            with torch.autocast(device_type="cpu", dtype=amp_dtype):
                loss = model(x).sum()
        else:
            loss = model(x).sum()
        loss.backward()
    """
    yaml = """
    default: &DEFAULT
      enable_amp: !!bool False
      amp_dtype: 'float16'
      channels_last: !!bool False
    fast:
      <<: *DEFAULT
      enable_amp: !!bool True
    """
    root = _project(tmp_path, {"train.py": train, "config.yaml": yaml, "params.py": "def load(): pass\n"})
    config = {"input": {"value": {}, "where": "train.py:13"}, "parameters": {"value": {}, "where": "train.py:13"},
              "model": {"value": {}, "where": "train.py:4", "stack": ["train.py:4"]}}
    ran = {"train.py": [1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 14]}
    diff, notes = make_patch(str(root / "train.py"), [{"intervention": "channels-last", "params": {}},
                                                      {"intervention": "amp", "params": {}}],
                             config, cwd=str(root), executed=ran)
    lines = diff.splitlines()
    assert "+++ b/train.py" not in diff            # the code is left as its author wrote it
    assert "-  channels_last: !!bool False" in lines and "+  channels_last: !!bool True" in lines
    assert "+  enable_amp: !!bool True" in lines and '+  amp_dtype: "bfloat16"' in lines
    assert all(n["applied"] for n in notes) and "own switch" in notes[0]["edits"][0]


def test_the_yaml_section_the_command_line_names_wins_over_a_value_seen(tmp_path):
    """Under --apply the run observed the fix's value (8 workers), which another section (fast)
    already holds: the section the command line chose (--config default) is edited."""
    src = """
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    def make(params):
        return DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=2, num_workers=params.num_data_workers)
    """
    yaml = """
    default: &DEFAULT
      num_data_workers: 4
    fast:
      <<: *DEFAULT
      num_data_workers: 8
    """
    root = _project(tmp_path, {"t.py": src, "config.yaml": yaml})
    config = {"dataloader": {"value": {"num_workers": 8, "pin_memory": True}, "where": "t.py:4"}}
    diff, _ = make_patch(str(root / "t.py"), [{"intervention": "dataloader-workers", "params": {"num_workers": 8}}],
                         config, cwd=str(root), argv=["--config", "default"])
    assert "-  num_data_workers: 4" in diff.splitlines() and "+  num_data_workers: 8" in diff.splitlines()


def test_workers_superseded_by_a_preloaded_dataset_are_no_shortfall():
    """preload-dataset serves batches from the device with num_workers=0: the workers fix it
    superseded did not fail to take, it stepped aside, and is not listed as a miss."""
    fixes = [{"intervention": "dataloader-workers", "params": {"num_workers": 8}},
             {"intervention": "preload-dataset", "params": {}}]
    notes = [{"intervention": "dataloader-workers", "applied": True, "where": "train.py:117",
              "superseded_by": "preload-dataset"},
             {"intervention": "preload-dataset", "applied": True, "where": "train.py:117"}]
    config = {"dataloader": {"value": {"num_workers": 0, "dataset": "_PreloadedOnDevice"}}}
    rows = verify.checks(fixes, notes, config, {})
    assert rows[0]["took_effect"] is None and "superseded by preload-dataset" in rows[0]["observed"]
    assert not [line for line in verification.shortfalls({"checks": rows}) if line.startswith("dataloader-workers")]


def test_a_shortfall_inside_the_run_to_run_band_is_not_told_apart_from_the_stack():
    """On a host whose runs spread 30% (the trials' threshold for one run against one), a patched
    run at 85% of the stack's is not shown to fall short; at 65% it is; at the GPU's 6% band 85% is."""
    rows = [{"fix": "f", "took_effect": True, "expected": "e", "observed": "o"}]
    assert verify.status_of(0.85, rows, noise_band=0.30) == "verified"
    assert verify.status_of(0.65, rows, noise_band=0.30) == "short"
    assert verify.status_of(0.85, rows, noise_band=0.06) == "short"
    # two patched runs 41% apart (a shared host): the band they give is capped, 49% is short
    assert verify.status_of(0.49, rows, noise_band=0.82) == "short"
    assert verify.status_of(0.75, rows, noise_band=0.82) == "verified"
    line = verification.summary_line({"status": "verified", "samples_per_s": 85.0, "of_stack": 0.85,
                                      "within_noise": 0.30, "checks": rows})
    assert line == "verified as plain python: 85 samples/s (85% of the stack, within the 30% run-to-run band)"
    # a sequence model's real tokens a second beside its samples
    line = verification.summary_line({"status": "verified", "samples_per_s": 85.0, "tokens_per_s": 43520.0,
                                      "speedup_vs_baseline": 2.0, "checks": rows})
    assert line == "verified as plain python: 85 samples/s, 43,520 tokens/s (2.00x)"


@pytest.mark.parametrize("of_stack,took,status", [
    (0.99, [True, None], "verified"),     # a check the run cannot show does not count against it
    (None, [True], "verified"),           # no stack to compare with (--apply without trials)
    (0.99, [True, False], "partial"),     # the other fixes reached the stack: still not the run measured
    (0.50, [False], "partial"),
    (0.80, [True, True], "short"),
])
def test_verified_only_when_every_edit_took_and_the_stack_is_reached(of_stack, took, status):
    rows = [{"fix": f"f{i}", "took_effect": t, "expected": "e", "observed": "o"} for i, t in enumerate(took)]
    assert verify.status_of(of_stack, rows) == status
    line = verification.summary_line({"status": status, "samples_per_s": 100.0, "of_stack": of_stack, "checks": rows})
    head = {"verified": "verified as plain python", "short": "fixes.patch as plain python falls short",
            "partial": f"fixes.patch as plain python: partial ({took.count(False)} edit"}[status]
    assert line.startswith(head), line


def test_the_recommended_command_is_the_users_with_the_patchs_flag_changes():
    """patch.command: python and the script as typed, the user's arguments with the flags the
    patch changes on the command line; the ddp fix's torchrun launch with the same arguments."""
    workers = {"intervention": "dataloader-workers", "applied": True,
               "argv_changes": [{"flag": "--numworkers", "from": "1", "to": 8}]}
    args = ["--numworkers", "1", "--epochs=3"]
    assert verify.recommended_command("main.py", args, []) == ["python", "main.py", *args]
    assert verify.recommended_command("src/main.py", args, [workers]) == \
        ["python", "src/main.py", "--numworkers", "8", "--epochs=3"]
    ddp = {"intervention": "ddp", "applied": True, "launch": "torchrun --nproc-per-node 2 'my dir/main.py' "
                                                              "--numworkers 1 --epochs=3"}
    assert verify.recommended_command("my dir/main.py", args, [workers, ddp]) == \
        ["torchrun", "--nproc-per-node", "2", "my dir/main.py", "--numworkers", "8", "--epochs=3"]
    not_placed = {**ddp, "applied": False}
    assert verify.recommended_command("main.py", [], [not_placed])[0] == "python"
    header = verify.patch_header(["python", "my dir/main.py", "--numworkers", "8"])
    assert "    python 'my dir/main.py' --numworkers 8\n" in header and header.endswith("\n\n")
    assert not any(line.startswith(("--- ", "+++ ", "@@", "diff ")) for line in header.splitlines())


TRAINER_MAIN = """
import argparse
from trainer import Train

p = argparse.ArgumentParser()
p.add_argument("--numworkers", type=int, default=1)
p.add_argument("--epochs", type=int, default=1)
args = p.parse_args()
Train(args.epochs).run(num_workers=args.numworkers)
"""
TRAINER_MOD = """
import torch
from torch.utils.data import DataLoader, TensorDataset


class Train:
    def __init__(self, epochs):
        self.epochs = epochs

    def run(self, num_workers=0):
        ds = TensorDataset(torch.randn(8, 2))
        loader = DataLoader(ds, batch_size=2, num_workers=num_workers)
        return loader
"""


@pytest.mark.parametrize("argv,expect", [
    (["--numworkers", "1"], "flag"),      # the user passes it: the command changes
    ([], "default"),                       # left at its default: the default changes
])
def test_a_worker_count_passed_down_as_a_parameter_is_changed_where_the_user_sets_it(tmp_path, argv, expect):
    """main.py --numworkers 1 → Train().run(num_workers=args.numworkers) → DataLoader(...,
    num_workers=num_workers) in a method of another module: the value is followed through the
    parameter to the caller's argument and on to the flag, not written as a literal at the call."""
    root = _project(tmp_path, {"main.py": TRAINER_MAIN, "trainer.py": TRAINER_MOD})
    config = {"dataloader": {"value": {"num_workers": 1}, "where": "trainer.py:11"}}
    fixes = [{"intervention": "dataloader-workers", "params": {"num_workers": 8}}]
    diff, notes = make_patch(str(root / "main.py"), fixes, config, cwd=str(root), argv=argv)
    note = notes[0]
    assert note["applied"], note
    added = "".join(line for line in diff.splitlines() if line.startswith("+"))
    assert "num_workers=8" not in added      # the user's expression stays at the call
    # the chain from the call to where the user sets it (run.json config.dataloader.source)
    assert note["sources"]["num_workers"] == ["trainer.py:11", "main.py:8",
                                              "argv:--numworkers" if expect == "flag" else "main.py:5"], note
    if expect == "flag":
        assert note["argv_changes"] == [{"flag": "--numworkers", "from": "1", "to": "8"}], note
        assert verify.recommended_command("main.py", argv, notes) == ["python", "main.py", "--numworkers", "8"]
    else:
        assert '+p.add_argument("--numworkers", type=int, default=8)' in diff.splitlines(), diff
        assert not note.get("argv_changes")


def test_a_value_kept_on_self_is_followed_to_the_constructors_caller(tmp_path):
    main = """
    import argparse
    from trainer import Train
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args()
    Train(workers=args.workers).run()
    """
    mod = """
    import torch
    from torch.utils.data import DataLoader, TensorDataset


    class Train:
        def __init__(self, workers):
            self.workers = workers

        def run(self):
            return DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=2, num_workers=self.workers)
    """
    root = _project(tmp_path, {"main.py": main, "trainer.py": mod})
    config = {"dataloader": {"value": {"num_workers": 2}, "where": "trainer.py:10"}}
    diff, notes = make_patch(str(root / "main.py"), [{"intervention": "dataloader-workers", "params": {"num_workers": 8}}],
                             config, cwd=str(root), argv=["--workers", "2"])
    assert notes[0]["argv_changes"] == [{"flag": "--workers", "from": "2", "to": "8"}], notes
    assert "num_workers=8" not in "".join(line for line in diff.splitlines() if line.startswith("+"))


def test_a_yaml_named_on_the_command_line_is_edited_in_the_section_it_runs(tmp_path):
    """train.py --yaml_config my.yaml --config adv: the edit goes into my.yaml (not the parser's
    default file), in section adv, which inherits the key through a merge key: an override line
    there, the anchor other sections share left alone."""
    src = """
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    def make(params):
        return DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=2, num_workers=params.num_data_workers)
    """
    default = """
    default: &DEFAULT
      num_data_workers: 4
    """
    mine = """
    base: &B
      num_data_workers: 4
      lr: 0.1
    adv:
      <<: *B
      lr: 0.2
    other:
      <<: *B
    """
    root = _project(tmp_path, {"t.py": src, "config/cifar100.yaml": default, "my.yaml": mine})
    config = {"dataloader": {"value": {"num_workers": 4}, "where": "t.py:4"}}
    diff, notes = make_patch(str(root / "t.py"), [{"intervention": "dataloader-workers", "params": {"num_workers": 8}}],
                             config, cwd=str(root), argv=["--yaml_config", "my.yaml", "--config", "adv"])
    assert notes[0]["applied"], notes
    assert "cifar100.yaml" not in diff and "+++ b/my.yaml" in diff
    lines = diff.splitlines()
    assert "+  num_data_workers: 8" in lines and "-  num_data_workers: 4" not in lines      # base untouched
    assert any("section adv" in e for e in notes[0]["edits"]), notes
    assert notes[0]["sources"]["num_workers"] == ["t.py:4", "my.yaml:adv.num_data_workers"]


def test_the_yaml_file_the_run_opened_is_edited_not_another_that_holds_the_key(tmp_path):
    """The run read conf/b.yaml (config_files): the edit goes there, though conf/a.yaml holds the
    key too and the command line names neither."""
    src = """
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    def make(params):
        return DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=2, num_workers=params.workers)
    """
    root = _project(tmp_path, {"t.py": src, "conf/a.yaml": "workers: 2\n", "conf/b.yaml": "workers: 2\n"})
    config = {"dataloader": {"value": {"num_workers": 2}, "where": "t.py:4"},
              "config_files": {"value": [str((root / "conf" / "b.yaml").resolve())], "where": "t.py:9"}}
    diff, notes = make_patch(str(root / "t.py"), [{"intervention": "dataloader-workers", "params": {"num_workers": 8}}],
                             config, cwd=str(root))
    assert "+++ b/conf/b.yaml" in diff and "conf/a.yaml" not in diff, diff
    assert notes[0]["sources"]["num_workers"] == ["t.py:4", "conf/b.yaml:1"], notes


def test_channels_last_converts_no_input_the_run_saw_as_not_4d(tmp_path):
    """A GAN's generator called with a 2-D text embedding first: the model is converted, the
    embedding is not (the trial converts 4-D inputs only; .contiguous(channels_last) on a 2-D
    tensor raises), and the note says to convert a 4-D input by hand."""
    src = """
    import torch
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Unflatten(1, (4, 4, 4)), torch.nn.Conv2d(4, 4, 3))
    for _ in range(2):
        emb = torch.randn(8, 16)
        out = model(emb)
    """
    root = _project(tmp_path, {"g.py": src})
    config = {"parameters": {"value": {"conv_memory_format": "contiguous"}, "where": "g.py:2"},
              "input": {"value": {"shape": [8, 16], "dtype": "float32"}, "where": "g.py:5"}}
    diff, notes = make_patch(str(root / "g.py"), [{"intervention": "channels-last", "params": {}}], config,
                             cwd=str(root))
    assert notes[0]["applied"] and "+model = model.to(memory_format=torch.channels_last)" in diff.splitlines(), diff
    assert "emb.contiguous" not in diff and "2-D" in notes[0]["warning"], notes


def test_an_unset_option_defers_to_the_yaml_section_the_run_reads(tmp_path):
    """sc23-dl-tutorial's layout: --num_data_workers (default None) overrides the YAML only when
    passed; the run gave --yaml_config and --config=short (a --flag=value token): the section
    short gets the value, the option's default stays None."""
    src = """
    import argparse
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    p = argparse.ArgumentParser()
    p.add_argument("--num_data_workers", default=None, type=int)
    def make(params):
        return DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=2, num_workers=params.num_data_workers)
    """
    yaml = """
    base: &base
      num_data_workers: 0
    short: &short_ls
      <<: *base
      lr: 0.1
    """
    root = _project(tmp_path, {"t.py": src, "config/ViT.yaml": yaml})
    config = {"dataloader": {"value": {"num_workers": 0}, "where": "t.py:7"}}
    diff, notes = make_patch(str(root / "t.py"), [{"intervention": "dataloader-workers", "params": {"num_workers": 8}}],
                             config, cwd=str(root), argv=["--yaml_config", "./config/ViT.yaml", "--config=short"])
    lines = diff.splitlines()
    assert "+  num_data_workers: 8" in lines and "-  num_data_workers: 0" not in lines, diff
    assert "default=8" not in diff     # the option stays unset: passed, it still overrides the file
    assert notes[0]["sources"]["num_workers"][-1] == "config/ViT.yaml:short.num_data_workers", notes


def test_several_overrides_in_one_inheriting_section_accumulate(tmp_path):
    """AMP's switch and its dtype, and channels_last's switch, each added to the section the run
    reads: all three lines land after its merge key."""
    src = """
    import torch
    def run(params):
        if params.enable_amp:
            with torch.autocast("cpu", dtype=getattr(torch, params.amp_dtype)):
                pass
        return params.channels_last
    """
    yaml = """
    default: &DEFAULT
      enable_amp: !!bool False
      amp_dtype: "float16"
      channels_last: !!bool False
    short:
      <<: *DEFAULT
      lr: 0.1
    """
    root = _project(tmp_path, {"t.py": src, "config.yaml": yaml})
    from advisor import fixes as registry
    from advisor.patch import core, knobs

    ctx = core.PatchContext(script=str(root / "t.py"), root=str(root), cwd=str(root), config={},
                            argv=["--config", "short"], registry=registry)
    f = ctx.file(str(root / "t.py"))
    for key, new in (("enable_amp", "True"), ("amp_dtype", '"bfloat16"'), ("channels_last", "True")):
        assert knobs._yaml(ctx, key, new, None, key) is not None
    diff = ctx.render([])
    added = [line for line in diff.splitlines() if line.startswith("+  ")]
    assert added == ["+  enable_amp: True", '+  amp_dtype: "bfloat16"', "+  channels_last: True"], diff
    assert f.rel == "t.py"


def test_a_call_of_another_function_of_the_same_name_does_not_stand_for_the_caller(tmp_path):
    """def train(loader_workers=0) is called as train(loader_workers=args.workers), and
    model.train() (another train, passing nothing) runs before it: the flag is followed, not the
    parameter's default edited."""
    src = """
    import argparse
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=1)
    args = p.parse_args()
    model = torch.nn.Linear(2, 2)
    def train(loader_workers=0):
        return DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=2, num_workers=loader_workers)
    model.train()
    train(loader_workers=args.workers)
    """
    root = _project(tmp_path, {"t.py": src})
    config = {"dataloader": {"value": {"num_workers": 1}, "where": "t.py:9"}}
    diff, notes = make_patch(str(root / "t.py"), [{"intervention": "dataloader-workers", "params": {"num_workers": 8}}],
                             config, cwd=str(root), argv=["--workers", "1"])
    assert notes[0]["argv_changes"] == [{"flag": "--workers", "from": "1", "to": "8"}], notes
    assert "loader_workers=0" in (root / "t.py").read_text() and "-def train" not in diff


ENV_SCRIPT = """
import os
import torch
from torch.utils.data import DataLoader, TensorDataset

workers = int(os.environ.get("LOADER_WORKERS", "1"))
loader = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=2, num_workers=workers)
"""


@pytest.mark.parametrize("environ", [{"LOADER_WORKERS": "2"}, {}], ids=["set", "unset"])
def test_a_value_from_an_environment_variable_changes_where_the_run_set_it(tmp_path, environ):
    """os.environ.get("LOADER_WORKERS", "1"): a variable the run's environment set is changed on
    the recommended command (LOADER_WORKERS=8 python t.py); one it did not set has its default
    changed, still a string, and the chain names the variable (config.dataloader.source)."""
    root = _project(tmp_path, {"t.py": ENV_SCRIPT})
    config = {"dataloader": {"value": {"num_workers": 1}, "where": "t.py:6"}}
    fix = [{"intervention": "dataloader-workers", "params": {"num_workers": 8}}]
    diff, notes = make_patch(str(root / "t.py"), fix, config, cwd=str(root), argv=["--epochs", "1"], environ=environ)
    note = notes[0]
    assert note["applied"], note
    if environ:
        assert note["env_changes"] == [{"name": "LOADER_WORKERS", "from": "2", "to": "8"}]
        assert note["sources"]["num_workers"] == ["t.py:6", "t.py:5", "env:LOADER_WORKERS"]
        assert '"1"' in diff or "LOADER_WORKERS" not in diff       # the code keeps the user's read
        assert verify.recommended_command("t.py", ["--epochs", "1"], notes) == \
            ["LOADER_WORKERS=8", "python", "t.py", "--epochs", "1"]
        assert verify.command_line(verify.recommended_command("t.py", [], notes)) == "LOADER_WORKERS=8 python t.py"
        assert verify.environ_changes(notes) == {"LOADER_WORKERS": "8"}
    else:
        assert '+workers = int(os.environ.get("LOADER_WORKERS", \'8\'))' in diff.splitlines(), diff
        assert note["sources"]["num_workers"] == ["t.py:6", "t.py:5", "env:LOADER_WORKERS", "t.py:5"]
        assert not note.get("env_changes")
        assert verify.recommended_command("t.py", [], notes) == ["python", "t.py"]


def test_a_required_environment_variable_the_run_did_not_set_is_named(tmp_path):
    root = _project(tmp_path, {"t.py": ENV_SCRIPT.replace('os.environ.get("LOADER_WORKERS", "1")',
                                                          'os.environ["LOADER_WORKERS"]')})
    config = {"dataloader": {"value": {"num_workers": 1}, "where": "t.py:6"}}
    fix = [{"intervention": "dataloader-workers", "params": {"num_workers": 8}}]
    _diff, notes = make_patch(str(root / "t.py"), fix, config, cwd=str(root), environ={})
    assert "environment variable LOADER_WORKERS, not set in this run: set LOADER_WORKERS=8" in notes[0]["warning"]


def test_the_verification_runs_the_recommended_command_with_its_environment(tmp_path):
    """The worker count comes from LOADER_WORKERS, which the user's environment sets: the
    recommended command sets it (LOADER_WORKERS=2 python t.py), the code keeps reading it, and
    the verification runs the script with that environment: its check sees 2 workers."""
    root = _project(tmp_path / "project", {"t.py": ENV_SCRIPT.replace(
        "loader = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=2, num_workers=workers)",
        "loader = DataLoader(TensorDataset(torch.randn(64, 2)), batch_size=2, num_workers=workers)\n"
        "model = torch.nn.Linear(2, 2)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for epoch in range(20):\n    for (x,) in loader:\n        model(x).sum().backward()\n"
        "        opt.step()\n        opt.zero_grad()\n")})
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "advisor", "analyze", "--no-trials", "--apply",
                           "dataloader-workers:num_workers=2", "--steps", "6", "--min-time", "0", "--out", str(out),
                           str(root / "t.py")], cwd=root, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "LOADER_WORKERS": "0", "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    patch = json.loads((out / "run.json").read_text())["patch"]
    assert patch["command"] == ["LOADER_WORKERS=2", "python", str(root / "t.py")]
    assert "num_workers=workers," in (out / "fixes.patch").read_text()
    v = patch["verification"]
    assert v["environ"] == {"LOADER_WORKERS": "2"} and v["command"] == patch["command"]
    assert [c["took_effect"] for c in v["checks"] if c["fix"] == "dataloader-workers"] == [True], v["checks"]
    assert f"run: LOADER_WORKERS=2 python {root / 't.py'}" in proc.stderr.replace("\n", " ")


CLICK_SCRIPT = """
import click
import torch
from torch.utils.data import DataLoader, TensorDataset


@click.command()
@click.option("--workers", "-j", default=2, type=int)
@click.option("--epochs", default=1)
def main(workers, epochs):
    loader = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=2, num_workers=workers)


if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize("argv", [["-j", "1", "--epochs", "3"], ["--epochs", "3"]], ids=["passed", "default"])
def test_a_click_option_is_changed_on_the_command_line_or_at_its_default(tmp_path, argv):
    root = _project(tmp_path, {"t.py": CLICK_SCRIPT})
    config = {"dataloader": {"value": {"num_workers": 2}, "where": "t.py:10"}}
    fix = [{"intervention": "dataloader-workers", "params": {"num_workers": 8}}]
    diff, notes = make_patch(str(root / "t.py"), fix, config, cwd=str(root), argv=argv)
    note = notes[0]
    assert note["applied"], note
    if argv[0] == "-j":
        assert note["argv_changes"] == [{"flag": "-j", "from": "1", "to": "8"}]
        assert note["sources"]["num_workers"] == ["t.py:10", "argv:-j"]
        assert verify.recommended_command("t.py", argv, notes) == ["python", "t.py", "-j", "8", "--epochs", "3"]
    else:
        assert '+@click.option("--workers", "-j", default=8, type=int)' in diff.splitlines(), diff
        assert note["sources"]["num_workers"] == ["t.py:10", "t.py:7"]


TYPER_PARAMS = {
    "option-default": ('num_workers: int = typer.Option(2, "--num-workers", "-w")',
                       '+def main(num_workers: int = typer.Option(8, "--num-workers", "-w"), epochs: int = 1):'),
    "annotated": ('num_workers: Annotated[int, typer.Option("--num-workers", "-w")] = 2',
                  '+def main(num_workers: Annotated[int, typer.Option("--num-workers", "-w")] = 8, epochs: int = 1):'),
    "plain": ("num_workers: int = 2", "+def main(num_workers: int = 8, epochs: int = 1):"),
}


@pytest.mark.parametrize("passed", [True, False], ids=["passed", "default"])
@pytest.mark.parametrize("shape", sorted(TYPER_PARAMS))
def test_a_typer_option_is_changed_on_the_command_line_or_at_its_default(tmp_path, shape, passed):
    param, expected = TYPER_PARAMS[shape]
    src = f"""
    import typer
    import torch
    from typing import Annotated
    from torch.utils.data import DataLoader, TensorDataset

    app = typer.Typer()


    @app.command()
    def main({param}, epochs: int = 1):
        loader = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=2, num_workers=num_workers)


    if __name__ == "__main__":
        app()
    """
    root = _project(tmp_path, {"t.py": src})
    config = {"dataloader": {"value": {"num_workers": 2}, "where": "t.py:11"}}
    fix = [{"intervention": "dataloader-workers", "params": {"num_workers": 8}}]
    flag = "--num-workers" if passed else None
    argv = [flag, "1"] if shape != "plain" and passed else (["--num-workers=1"] if passed else [])
    diff, notes = make_patch(str(root / "t.py"), fix, config, cwd=str(root), argv=argv)
    note = notes[0]
    assert note["applied"], note
    if passed:
        assert note["argv_changes"] == [{"flag": "--num-workers", "from": "1", "to": "8"}], note
        assert verify.argv_with_changes(argv, notes) in (["--num-workers", "8"], ["--num-workers=8"])
    else:
        assert expected in diff.splitlines(), diff
        assert note["sources"]["num_workers"] == ["t.py:11", "t.py:10"]


OMEGACONF_SCRIPT = """
import torch
from omegaconf import OmegaConf
from torch.utils.data import DataLoader, TensorDataset

cfg = OmegaConf.merge(OmegaConf.load("conf/config.yaml"), OmegaConf.from_cli())
loader = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=2, num_workers=cfg.data.num_workers)
"""
OMEGACONF_YAML = """
data:
  num_workers: 2
  batch_size: 64
trainer:
  epochs: 3
"""


@pytest.mark.parametrize("argv", [["data.num_workers=4", "trainer.epochs=1"], ["trainer.epochs=1"]],
                         ids=["override-passed", "file"])
def test_a_hydra_style_override_on_the_command_line_wins_over_the_config_file(tmp_path, argv):
    """``data.num_workers=4`` on the command line overrides the YAML: the recommended command
    changes that word; without it the YAML file's key changes."""
    root = _project(tmp_path, {"t.py": OMEGACONF_SCRIPT, "conf/config.yaml": OMEGACONF_YAML})
    config = {"dataloader": {"value": {"num_workers": 4}, "where": "t.py:6"}}
    fix = [{"intervention": "dataloader-workers", "params": {"num_workers": 8}}]
    diff, notes = make_patch(str(root / "t.py"), fix, config, cwd=str(root), argv=argv)
    note = notes[0]
    assert note["applied"], note
    if len(argv) == 2:
        assert note["argv_changes"] == [{"flag": "data.num_workers", "from": "4", "to": "8"}]
        assert note["sources"]["num_workers"] == ["t.py:6", "argv:data.num_workers"]
        assert verify.argv_with_changes(argv, notes) == ["data.num_workers=8", "trainer.epochs=1"]
        assert "+++ b/conf/config.yaml" not in diff
    else:
        assert "+  num_workers: 8" in diff.splitlines(), diff
        assert note["sources"]["num_workers"] == ["t.py:6", "conf/config.yaml:data.num_workers"]


def test_cudnn_benchmark_is_not_set_in_a_seeded_branch_the_run_skipped(tmp_path):
    """pytorch/examples' ImageNet: ``if args.seed is not None: cudnn.deterministic = True;
    cudnn.benchmark = False``. The run gave no seed: that branch did not run, so editing it would
    change nothing (the verification saw benchmark False) and would override the user's
    reproducible mode whenever they seed. The flag goes after the imports instead."""
    src = """
    import argparse
    import torch
    import torch.backends.cudnn as cudnn
    p = argparse.ArgumentParser()
    p.add_argument("--seed", type=int, default=None)
    args = p.parse_args()
    if args.seed is not None:
        torch.manual_seed(args.seed)
        cudnn.deterministic = True
        cudnn.benchmark = False
    model = torch.nn.Conv2d(3, 8, 3)
    """
    root = _project(tmp_path, {"t.py": src})
    ran = {"t.py": [1, 2, 3, 4, 5, 6, 7, 8, 12]}
    diff, notes = make_patch(str(root / "t.py"), [{"intervention": "cudnn-benchmark", "params": {}}], {},
                             cwd=str(root), executed=ran)
    assert notes[0]["applied"], notes
    lines = diff.splitlines()
    assert "-        cudnn.benchmark = False" not in lines
    assert "+torch.backends.cudnn.benchmark = True" in lines, diff
