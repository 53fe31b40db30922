"""advisor.patch: accepted fixes → a unified diff of the user's script.

Real files only: a script is copied into a temporary git repository, the observed config is
built by locating its call sites with ast (as the child would report them), the diff is
checked with `git apply --check` / `patch -p1`, applied, the result inspected with ast and
the patched script RUN on the CPU.
"""

from __future__ import annotations

import ast
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from advisor.fixes import make_patch
from advisor.patch import LR_COMMENT

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "cifar_resnet.py"
FIXTURE = ROOT / "tests" / "fixtures" / "scripts" / "slow_recipe.py"

ALL_FIXES = [
    ("set-to-none", {}),
    ("fused-optimizer", {}),
    ("cudnn-benchmark", {}),
    ("tf32", {}),
    ("dataloader-workers", {"num_workers": 2, "pin_memory": True}),
    ("pin-memory", {"pin_memory": True}),
    ("precompute-samples", {}),
    ("batch-size", {"factor": 2}),
    ("channels-last", {}),
    ("amp", {"dtype": "bfloat16"}),
    ("torch-compile", {}),
]


def fixes(*names: str) -> list[dict]:
    table = dict(ALL_FIXES)
    return [{"intervention": n, "params": dict(table.get(n, {}))} for n in names]


# ----------------------------------------------------------------------------- helpers

def _git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
                          cwd=cwd, capture_output=True, text=True, check=check)


def _repo(tmp_path: Path, source: Path, rel: str | None = None, text: str | None = None) -> Path:
    """A git repository holding the script at ``rel``; returns the script's path."""
    repo = tmp_path / "repo"
    script = repo / (rel or source.name)
    script.parent.mkdir(parents=True, exist_ok=True)
    if text is None:
        shutil.copyfile(source, script)
    else:
        script.write_text(text)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "original")
    return script


def _digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and ".git" not in p.parts}


def _name(func: ast.expr) -> str | None:
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def _first_line(tree: ast.AST, pred, last: bool = False) -> int | None:
    lines = sorted(n.lineno for n in ast.walk(tree) if pred(n))
    return (lines[-1] if last else lines[0]) if lines else None


def _is_call(n, name: str | None = None, names: tuple = ()) -> bool:
    return isinstance(n, ast.Call) and (_name(n.func) == name or _name(n.func) in names)


def locate(script: Path, model: str, inputs: str) -> dict[str, int]:
    """The lines the child would report as config sites for this script."""
    tree = ast.parse(script.read_text())
    return {
        "dataloader": _first_line(tree, lambda n: _is_call(n, "DataLoader")),
        "zero_grad": _first_line(tree, lambda n: _is_call(n, "zero_grad")),
        "optimizer": _first_line(tree, lambda n: _is_call(n, names=("SGD", "Adam", "AdamW"))),
        "cudnn.benchmark": _first_line(tree, lambda n: isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Attribute)
                                       and n.targets[0].attr == "benchmark"),
        # where the model is created/moved: `model = build_model().to(device)` / `net.to(device)`
        "parameters": _first_line(tree, lambda n: (isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name)
                                                   and n.targets[0].id == model and isinstance(n.value, ast.Call))
                                  or (isinstance(n, ast.Expr) and _is_call(n.value, "to")
                                      and isinstance(n.value.func.value, ast.Name) and n.value.func.value.id == model),
                                  last=True),
        "input": _first_line(tree, lambda n: isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == model),
        "h2d_copy": _first_line(tree, lambda n: _is_call(n, "to") and isinstance(n.func.value, ast.Name)
                                and n.func.value.id == inputs),
    }


def config_for(script: Path, model: str, inputs: str, *, prefix: str | None = None, device: str = "cpu",
               drop: tuple = ()) -> dict:
    lines = locate(script, model, inputs)
    where = prefix if prefix is not None else script.name
    values = {"input": {"dtype": "float32", "shape": [8, 3, 32, 32], "memory_format": "contiguous", "device": device},
              "parameters": {"dtype": "float32", "conv_memory_format": "contiguous", "device": device},
              "zero_grad": {"set_to_none": False}, "cudnn.benchmark": False,
              "h2d_copy": {"non_blocking": False, "pinned_source": False}}
    missing = [k for k, line in lines.items() if line is None and k not in drop]
    assert not missing, f"sites not found in {script}: {missing}"
    return {k: {"value": values.get(k, {}), "where": f"{where}:{line}"} for k, line in lines.items() if k not in drop}


def apply(script: Path, diff: str, cwd: Path | None = None) -> None:
    cwd = cwd or script.parent
    (cwd.parent / "fix.diff").write_text(diff)
    check = _git(cwd, "apply", "--check", "-v", str(cwd.parent / "fix.diff"), check=False)
    assert check.returncode == 0, check.stderr + "\n" + diff
    _git(cwd, "apply", str(cwd.parent / "fix.diff"))


def run(script: Path, *args: str, env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONWARNINGS": "ignore", **(env or {})}
    proc = subprocess.run([sys.executable, script.name, *args], cwd=script.parent, env=full_env,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def calls(tree: ast.AST, name: str) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if _is_call(n, name)]


def kwargs(call: ast.Call) -> dict:
    return {k.arg: k.value for k in call.keywords}


def literal(node):
    return ast.literal_eval(node)


def assigned(tree: ast.AST, dotted: str) -> list:
    """Values assigned to e.g. 'torch.backends.cudnn.benchmark' (compared by source text)."""
    return [literal(n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == dotted]


def stmt_index(body: list, text: str) -> int:
    return next(i for i, s in enumerate(body) if ast.unparse(s) == text)


def block_with(tree: ast.AST, text: str) -> list:
    """The statement list that directly holds the statement whose source is ``text``."""
    for node in ast.walk(tree):
        for field in ("body", "orelse"):
            body = getattr(node, field, None)
            if isinstance(body, list) and any(isinstance(s, ast.stmt) and ast.unparse(s) == text for s in body):
                return body
    raise AssertionError(f"no statement {text!r}")


# ----------------------------------------------------------------------------- the example

@pytest.fixture
def cifar(tmp_path):
    if not EXAMPLE.exists():
        pytest.fail("examples/cifar_resnet.py is missing")
    return _repo(tmp_path, EXAMPLE)


def test_no_pinned_memory_is_written_for_a_run_without_an_accelerator(cifar):
    """On a CPU the workers fix adds workers and no pin_memory (PyTorch would warn that no
    accelerator is found); the pin-memory fix has nothing to place."""
    config = config_for(cifar, "model", "inputs")
    diff, notes = make_patch(str(cifar), fixes("dataloader-workers", "pin-memory"), config)
    added = [line for line in diff.splitlines() if line.startswith("+")]
    assert not any("pin_memory=True" in line for line in added) and any("num_workers=2" in line for line in added)
    assert notes[1] == {"applied": False, "intervention": "pin-memory", "reason": "nothing to change"}


def test_all_fixes_compose_apply_and_run(cifar):
    before = _digest(cifar.parent)
    config = config_for(cifar, "model", "inputs")   # a CPU run (the patched script runs here below)
    diff, notes = make_patch(str(cifar), fixes(*[n for n, _ in ALL_FIXES]), config)
    assert _digest(cifar.parent) == before, "make_patch must not touch the user's files"

    assert [n["intervention"] for n in notes] == [n for n, _ in ALL_FIXES]
    # pinning has nothing to feed on a CPU (test_no_pinned_memory_is_written_for_a_run_without_an_accelerator)
    assert all(n["applied"] for n in notes if n["intervention"] != "pin-memory"), notes
    assert diff.startswith(f"--- a/{cifar.name}\n+++ b/{cifar.name}\n")
    assert diff.count("--- a/") == 1, "several fixes on one file make one diff"

    # patch(1) reads it too, from the script's directory
    dry = subprocess.run(["patch", "-p1", "--dry-run"], input=diff, cwd=cifar.parent, capture_output=True, text=True)
    assert dry.returncode == 0, dry.stdout + dry.stderr

    apply(cifar, diff)
    tree = ast.parse(cifar.read_text())

    dl = kwargs(calls(tree, "DataLoader")[0])
    # nothing pinned (the example's own pin_memory=False stays), so the workers persist
    assert literal(dl["num_workers"]) == 2 and literal(dl["persistent_workers"]) is True
    assert literal(dl["prefetch_factor"]) == 4 and literal(dl["pin_memory"]) is False
    assert ast.unparse(dl["batch_size"]) == "args.batch_size * 2"
    assert literal(dl["drop_last"]) is True and literal(dl["shuffle"]) is True        # untouched
    assert ast.unparse(calls(tree, "DataLoader")[0].args[0]) == "_every_sample(dataset)"
    defined = [d.name for d in tree.body if isinstance(d, ast.FunctionDef)]
    assert defined.index("_sample_chunk") == defined.index("_every_sample") + 1   # at module level, in order
    assert LR_COMMENT in cifar.read_text()

    sgd = kwargs(calls(tree, "SGD")[0])
    assert literal(sgd["fused"]) is True and "foreach" not in sgd
    assert literal(kwargs(calls(tree, "zero_grad")[0])["set_to_none"]) is True
    assert assigned(tree, "torch.backends.cudnn.benchmark") == [True]
    assert assigned(tree, "torch.backends.cuda.matmul.allow_tf32") == [True]
    assert assigned(tree, "torch.backends.cudnn.allow_tf32") == [True]
    tf32_stmt = next(s for s in tree.body if ast.unparse(s) == "torch.backends.cuda.matmul.allow_tf32 = True")
    last_import = max(i for i, s in enumerate(tree.body) if isinstance(s, (ast.Import, ast.ImportFrom)))
    assert tree.body.index(tf32_stmt) == last_import + 1

    # the copies: nothing pinned, so no non_blocking either (a GPU run's: the test below)
    for var in ("inputs", "targets"):
        copy = next(c for c in calls(tree, "to") if ast.unparse(c.func) == f"{var}.to")
        assert "non_blocking" not in kwargs(copy)

    # model: channels_last, then compile, right after it is created
    body = block_with(tree, "model = build_model().to(device)")
    i = stmt_index(body, "model = build_model().to(device)")
    assert [ast.unparse(s) for s in body[i + 1:i + 3]] == [
        "model = model.to(memory_format=torch.channels_last)", "model.compile()"]

    # loop: inputs converted, then forward + loss under autocast, backward outside it
    loop = block_with(tree, "loss.backward()")
    k = stmt_index(loop, "inputs = inputs.contiguous(memory_format=torch.channels_last)")
    with_stmt = loop[k + 1]
    assert isinstance(with_stmt, ast.With)
    assert ast.unparse(with_stmt.items[0].context_expr) == "torch.autocast(device_type='cpu', dtype=torch.bfloat16)"
    assert [ast.unparse(s) for s in with_stmt.body] == ["outputs = model(inputs)", "loss = criterion(outputs, targets)"]
    assert ast.unparse(loop[k + 2]) == "loss.backward()"

    # it runs: CPU, a few steps (compile disabled here; the fixture test compiles for real)
    out = run(cifar, "--steps", "3", "--batch-size", "8", "--num-samples", "64", "--device", "cpu",
              "--log-every", "1", env={"TORCH_COMPILE_DISABLE": "1"})
    assert "done: 3 steps" in out.stdout


def test_one_fix_is_a_one_line_diff(cifar):
    config = config_for(cifar, "model", "inputs")
    diff, notes = make_patch(str(cifar), fixes("set-to-none"), config)
    assert notes == [{"intervention": "set-to-none", "applied": True,
                      "where": config["zero_grad"]["where"], "edits": ["set_to_none=True"]}]
    removed = [ln for ln in diff.splitlines() if ln.startswith("-") and not ln.startswith("---")]
    added = [ln for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    assert removed == ["-            optimizer.zero_grad(set_to_none=False)"]
    assert added == ["+            optimizer.zero_grad(set_to_none=True)"]
    apply(cifar, diff)
    run(cifar, "--steps", "2", "--batch-size", "4", "--num-samples", "16", "--device", "cpu")


def test_sites_given_absolute_or_relative_to_cwd_and_root_prefix(cifar, tmp_path):
    repo = cifar.parent
    sub = repo / "examples"
    sub.mkdir()
    _git(repo, "mv", cifar.name, f"examples/{cifar.name}")
    script = sub / cifar.name
    # absolute sites
    config = config_for(script, "model", "inputs", prefix=str(script))
    diff, notes = make_patch(str(script), fixes("fused-optimizer", "cudnn-benchmark"), config, root=str(repo))
    assert all(n["applied"] for n in notes), notes
    assert diff.startswith(f"--- a/examples/{cifar.name}\n+++ b/examples/{cifar.name}\n")
    # sites relative to the run's cwd (the repository), script path relative too
    config2 = config_for(script, "model", "inputs", prefix=f"examples/{cifar.name}")
    diff2, notes2 = make_patch(f"examples/{cifar.name}", fixes("fused-optimizer", "cudnn-benchmark"), config2,
                               root=str(repo), cwd=str(repo))
    assert diff2 == diff and notes2[0]["where"].startswith("examples/")
    apply(script, diff, cwd=repo)
    assert assigned(ast.parse(script.read_text()), "torch.backends.cudnn.benchmark") == [True]


def test_missing_sites_and_unknown_fixes_are_reported_not_raised(cifar):
    before = _digest(cifar.parent)
    config = config_for(cifar, "model", "inputs", drop=("zero_grad", "optimizer", "input"))
    config["dataloader"]["where"] = f"{cifar.name}:1"           # a line with no DataLoader
    config["parameters"]["where"] = "elsewhere/missing.py:3"     # a file that is not there
    diff, notes = make_patch(str(cifar), fixes("set-to-none", "fused-optimizer", "dataloader-workers", "amp",
                                                "torch-compile", "no-such-fix"), config)
    assert diff == ""
    by = {n["intervention"]: n for n in notes}
    assert not any(n["applied"] for n in notes)
    assert "zero_grad" in by["set-to-none"]["reason"]
    assert "optimizer" in by["fused-optimizer"]["reason"]
    assert "DataLoader" in by["dataloader-workers"]["reason"]
    assert "input" in by["amp"]["reason"]
    assert "missing.py" in by["torch-compile"]["reason"]
    assert "no-such-fix" in by["no-such-fix"]["reason"]
    assert _digest(cifar.parent) == before


def test_nothing_to_change_is_reported(tmp_path):
    text = FIXTURE.read_text().replace("opt.zero_grad(set_to_none=False)", "opt.zero_grad()")
    script = _repo(tmp_path, FIXTURE, text=text)
    config = config_for(script, "net", "x")
    diff, notes = make_patch(str(script), fixes("set-to-none", "tf32"), config)
    assert notes[0]["applied"] is False and "default" in notes[0]["reason"]
    assert notes[1]["applied"] is True
    assert "zero_grad" not in diff


# ----------------------------------------------------------------------------- the fixture

def test_fixture_all_fixes_with_compile_and_no_import_torch(tmp_path):
    script = _repo(tmp_path, FIXTURE)
    original = script.read_bytes()
    assert not original.endswith(b"\n")
    config = config_for(script, "net", "x", device="cuda:0")
    diff, notes = make_patch(str(script), fixes(*[n for n, _ in ALL_FIXES]), config)
    assert all(n["applied"] for n in notes), notes
    assert script.read_bytes() == original
    apply(script, diff)
    tree = ast.parse(script.read_text())

    # the script only imported torch submodules: `import torch` is added before them
    names = [ast.unparse(s) for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom))]
    assert names.index("import torch") == names.index("import torch.nn as nn") - 1
    dl_call = calls(tree, "DataLoader")[0]
    dl = kwargs(dl_call)
    assert literal(dl["batch_size"]) == 32 and literal(dl["num_workers"]) == 2
    assert "persistent_workers" not in dl and literal(dl["prefetch_factor"]) == 4
    assert literal(dl["pin_memory"]) is True
    assert "num_workers=2,  # the slow way" in script.read_text()     # the comment stays on its line
    assert literal(kwargs(calls(tree, "Adam")[0])["fused"]) is True
    assert "foreach" not in kwargs(calls(tree, "Adam")[0])
    assert assigned(tree, "cudnn.benchmark") == [True]
    assert "torch.backends.cudnn.benchmark" not in script.read_text()  # the existing site was edited
    assert all(literal(kwargs(c)["non_blocking"]) is True for c in calls(tree, "to") if ast.unparse(c.func) in ("x.to", "y.to"))
    i = stmt_index(tree.body, "net.to(args.device)")
    assert [ast.unparse(s) for s in tree.body[i + 1:i + 3]] == [
        "net = net.to(memory_format=torch.channels_last)", "net.compile()"]
    loop = block_with(tree, "loss.backward()")
    w = next(s for s in loop if isinstance(s, ast.With))
    assert [ast.unparse(s) for s in w.body] == ["out = net(x)", "loss = F.cross_entropy(out, y)"]
    assert "# forward\n        x = x.contiguous(memory_format=torch.channels_last)" in script.read_text()

    out = run(script, "--steps", "4")       # torch.compile for real (inductor on the CPU)
    assert "done 4 steps" in out.stdout


def test_fixture_cudnn_inserted_backward_in_same_statement_and_no_trailing_newline(tmp_path):
    text = (FIXTURE.read_text()
            .replace("cudnn.benchmark = False\n", "")
            .replace("        out = net(x)\n        loss = F.cross_entropy(out, y)\n        loss.backward()\n",
                     "        F.cross_entropy(net(x), y).backward()\n")
            .replace('print(f"done {step} steps, loss {loss.item():.4f}")', "opt.zero_grad(set_to_none=False)"))
    script = _repo(tmp_path, FIXTURE, text=text)
    assert not script.read_bytes().endswith(b"\n")
    tree0 = ast.parse(text)
    zero_grads = sorted(c.lineno for c in calls(tree0, "zero_grad"))
    config = config_for(script, "net", "x", drop=("cudnn.benchmark",))
    config["zero_grad"]["where"] = f"{script.name}:{zero_grads[-1]}"     # the last line of the file
    diff, notes = make_patch(str(script), fixes("cudnn-benchmark", "amp", "set-to-none"), config)
    assert all(n["applied"] for n in notes), notes
    assert "\\ No newline at end of file" in diff
    apply(script, diff)
    patched = script.read_bytes()
    assert not patched.endswith(b"\n") and patched.endswith(b"opt.zero_grad(set_to_none=True)")
    tree = ast.parse(patched)
    # no cudnn.benchmark site: set after the last top-level import (torch imported for it)
    names = [ast.unparse(s) for s in tree.body]
    last_import = max(i for i, s in enumerate(tree.body) if isinstance(s, (ast.Import, ast.ImportFrom)))
    assert names[last_import + 1] == "torch.backends.cudnn.benchmark = True"
    assert "import torch" in names
    # the backward is in the model-call statement: only that statement is wrapped
    loop = block_with(tree, "opt.step()")
    w = next(s for s in loop if isinstance(s, ast.With))
    assert [ast.unparse(s) for s in w.body] == ["F.cross_entropy(net(x), y).backward()"]
    run(script, "--steps", "3")


def test_channels_last_input_not_a_name_and_fp16_amp_warn(tmp_path):
    text = FIXTURE.read_text().replace("out = net(x)", "out = net(x * 1.0)")
    script = _repo(tmp_path, FIXTURE, text=text)
    config = config_for(script, "net", "x")
    diff, notes = make_patch(str(script), [{"intervention": "channels-last", "params": {}},
                                           {"intervention": "amp", "params": {"dtype": "float16", "device_type": "cuda"}}],
                             config)
    assert notes[0]["applied"] and "not a plain name" in notes[0]["warning"]
    assert notes[1]["applied"] and "GradScaler" in notes[1]["warning"]
    assert 'torch.autocast(device_type="cuda", dtype=torch.float16)' in diff
    apply(script, diff)
    ast.parse(script.read_text())


def test_model_fixes_follow_the_model_binding_from_a_real_run_config():
    """The runner records `parameters` at the model's first call (`outputs = model(inputs)`,
    here from a real H200 run); the edits must land after `model = ...`, not on `outputs`."""
    import json as _json

    repo = Path(__file__).resolve().parent.parent
    config = _json.loads((repo / "tests/fixtures/runs/cifar_slow_h200/run.json").read_text())["config"]
    old = os.getcwd()
    os.chdir(repo)  # the run's `where` paths are relative to where it ran (the repo root)
    try:
        diff, notes = make_patch(str(repo / "examples/cifar_resnet.py"),
                                 [{"intervention": "channels-last", "params": {}},
                                  {"intervention": "torch-compile", "params": {}}],
                                 config, root=str(repo / "examples"))
    finally:
        os.chdir(old)
    assert all(n["applied"] for n in notes), notes
    added = [line[1:].strip() for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert added == ["model = model.to(memory_format=torch.channels_last)", "model.compile()",
                     "inputs = inputs.contiguous(memory_format=torch.channels_last)"]


def _losses(out: subprocess.CompletedProcess) -> list[str]:
    return [ln.split(" loss ")[1] for ln in out.stdout.splitlines() if " loss " in ln]


def _module_classes(tree: ast.Module) -> dict[str, int]:
    return {s.name: i for i, s in enumerate(tree.body) if isinstance(s, ast.ClassDef)}


def test_preload_dataset_patch_gathers_batches_from_collated_tensors(cifar):
    """The dataset collated once and the batches as slices of one index tensor, both classes at
    module level before the function; the DataLoader's batch size, shuffle and drop_last move
    into the batch sampler, which draws the permutation as RandomSampler does: the patched
    script trains on the very same batches (same losses, step by step)."""
    args = ("--steps", "3", "--batch-size", "8", "--num-samples", "64", "--device", "cpu", "--log-every", "1")
    before = run(cifar, *args)
    config = config_for(cifar, "model", "inputs")
    diff, notes = make_patch(str(cifar), [{"intervention": "preload-dataset", "params": {"device": "cpu"}}], config)
    assert notes[0]["applied"], notes
    assert any("_BatchesOnDevice" in e for e in notes[0]["edits"])
    apply(cifar, diff)
    tree = ast.parse(cifar.read_text())
    classes = _module_classes(tree)
    main = next(i for i, s in enumerate(tree.body) if isinstance(s, ast.FunctionDef) and s.name == "main")
    assert classes["_PreloadedOnDevice"] < main and classes["_BatchesOnDevice"] < main
    cls = tree.body[classes["_PreloadedOnDevice"]]
    assert {f.name for f in cls.body if isinstance(f, ast.FunctionDef)} >= {"__len__", "__getitems__"}
    loader = calls(tree, "DataLoader")[0]
    dl = kwargs(loader)
    assert ast.unparse(loader.args[0]) == "_PreloadedOnDevice(dataset, 'cpu')"
    assert literal(dl["num_workers"]) == 0 and literal(dl["pin_memory"]) is False
    assert not {"batch_size", "shuffle", "drop_last"} & set(dl)  # DataLoader refuses them beside a batch_sampler
    assert ast.unparse(dl["batch_sampler"]) == \
        "_BatchesOnDevice(len(dataset), args.batch_size, shuffle=True, drop_last=True, device='cpu')"
    assert ast.unparse(dl["collate_fn"]) == "lambda batch: batch"
    out = run(cifar, *args)
    assert "done: 3 steps" in out.stdout
    assert _losses(before) and _losses(before) == _losses(out)


def _loader_script(tmp_path: Path, loader_args: str) -> Path:
    """A small script: a map-style dataset, a DataLoader made with ``loader_args``, two epochs
    of steps printing each batch's label sum and the loss (the batches, and their order)."""
    text = f'''import torch
import torch.nn as nn


class Squares(torch.utils.data.Dataset):
    def __len__(self):
        return 22

    def __getitem__(self, i):
        return torch.full((4,), float(i)), i % 3


def main():
    torch.manual_seed(0)
    data = Squares()
    loader = torch.utils.data.DataLoader({loader_args})
    model = nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    print("batches", len(loader))
    for epoch in range(2):
        for x, y in loader:
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            print("batch", x[:, 0].tolist(), "loss", round(loss.item(), 6))


if __name__ == "__main__":
    main()
'''
    return _repo(tmp_path, FIXTURE, rel="train.py", text=text)


def _preload_run(script: Path, more: list[dict] | None = None, more_first: bool = True) -> tuple[str, list[dict], str]:
    """(the script's output before, the notes, its output after the patch)."""
    before = run(script).stdout
    tree = ast.parse(script.read_text())
    line = _first_line(tree, lambda n: _is_call(n, "DataLoader"))
    model_line = _first_line(tree, lambda n: isinstance(n, ast.Call) and _name(n.func) == "model")
    config = {"dataloader": {"value": {}, "where": f"train.py:{line}"},
              "input": {"value": {"device": "cpu"}, "where": f"train.py:{model_line}"}}
    preload = [{"intervention": "preload-dataset", "params": {"device": "cpu"}}]
    fixes = [*(more or []), *preload] if more_first else [*preload, *(more or [])]
    diff, notes = make_patch(str(script), fixes, config)
    assert all(n["applied"] for n in notes), notes
    apply(script, diff)
    return before, notes, run(script).stdout


@pytest.mark.parametrize("loader_args", [
    "data, 4, True, drop_last=True",              # positional batch size and shuffle
    "dataset=data, batch_size=5",                 # in order, the last batch short
    "data, batch_size=3, shuffle=False, drop_last=False, num_workers=0",
])
def test_preload_patch_moves_the_loaders_batching_into_the_batch_sampler(tmp_path, loader_args):
    script = _loader_script(tmp_path, loader_args)
    before, notes, after = _preload_run(script)
    loader = calls(ast.parse(script.read_text()), "DataLoader")[0]
    assert "batch_sampler" in kwargs(loader) and len(loader.args) <= 1
    assert after == before   # the same batches, in the same order, over two epochs


@pytest.mark.parametrize("loader_args", ["Squares(), 4, True", "dataset=(Squares()), batch_size=5"])
def test_preload_patch_evaluates_a_dataset_expression_once(tmp_path, loader_args):
    """DataLoader(SyntheticMNIST(n, transform), ...): the dataset is made once, bound where the
    batch sampler counts it (a patch that skips it falls to 8% of the stack, MNIST on an H100)."""
    script = _loader_script(tmp_path, loader_args)
    before, notes, after = _preload_run(script)
    call = calls(ast.parse(script.read_text()), "DataLoader")[0]
    dl = kwargs(call)
    dataset = dl["dataset"] if "dataset" in dl else call.args[0]
    assert ast.unparse(dataset) == "(_preloaded := _PreloadedOnDevice(Squares(), 'cpu'))"
    assert ast.unparse(dl["batch_sampler"]).startswith("_BatchesOnDevice(len(_preloaded), ")
    assert after == before


def test_precompute_patch_evaluates_a_dataset_expression_once(tmp_path):
    script = _loader_script(tmp_path, "Squares(), batch_size=4")
    before = run(script).stdout
    line = _first_line(ast.parse(script.read_text()), lambda n: _is_call(n, "DataLoader"))
    diff, notes = make_patch(str(script), [{"intervention": "precompute-samples", "params": {}}],
                             {"dataloader": {"value": {}, "where": f"train.py:{line}"}})
    assert notes[0]["applied"], notes
    apply(script, diff)
    dl = calls(ast.parse(script.read_text()), "DataLoader")[0]
    assert ast.unparse(dl.args[0]) == "_every_sample(Squares())"
    assert run(script).stdout == before


def test_preload_patch_takes_the_loader_keys_it_sets_out_of_unpacked_kwargs(tmp_path):
    """pytorch/examples' MNIST: DataLoader(dataset1, **train_kwargs), the dict holding
    num_workers (and persistent workers): the preloaded loader sets num_workers=0 itself, so the
    dict's copy is left out (it raised "got multiple values for keyword argument" on an H200)."""
    script = _loader_script(tmp_path, 'data, **{"batch_size": 4, "num_workers": 2, "persistent_workers": True}')
    before, notes, after = _preload_run(script)
    call = calls(ast.parse(script.read_text()), "DataLoader")[0]
    assert literal(kwargs(call)["num_workers"]) == 0
    assert "if k not in ('num_workers', 'collate_fn', 'pin_memory', 'persistent_workers', 'prefetch_factor')" \
        in ast.unparse(call)
    assert after == before


def test_preload_patch_keeps_a_loaders_own_sampler(tmp_path):
    """A sampler of the script's own stays: the batch's indices are handed over as a list."""
    script = _loader_script(tmp_path, "data, batch_size=4, sampler=torch.utils.data.SequentialSampler(range(22))")
    before, notes, after = _preload_run(script)
    assert "_BatchesOnDevice" not in script.read_text()
    assert any("keeps its own sampler" in e for e in notes[0]["edits"])
    assert after == before


@pytest.mark.parametrize("batch_first", [True, False])
def test_preload_patch_takes_the_batch_size_another_fix_set(tmp_path, batch_first):
    """batch-size x2 and preload-dataset on one DataLoader call, in either order: the batch
    sampler gets the new size (the preload edit runs last on the call)."""
    script = _loader_script(tmp_path, "data, batch_size=4, shuffle=True")
    _, notes, after = _preload_run(script, [{"intervention": "batch-size", "params": {"factor": 2}}], batch_first)
    dl = kwargs(calls(ast.parse(script.read_text()), "DataLoader")[0])
    assert ast.unparse(dl["batch_sampler"]) == "_BatchesOnDevice(len(data), 8, shuffle=True, device='cpu')"
    assert "batches 3" in after


def test_loader_fixes_replaced_by_the_preloaded_dataset_say_so(cifar):
    """workers + pinned memory kept, then preload-dataset: the diff's DataLoader has
    num_workers=0, and the workers' note says it was superseded instead of listing
    num_workers=8 as if it were in the diff."""
    config = config_for(cifar, "model", "inputs")
    diff, notes = make_patch(str(cifar), [{"intervention": "dataloader-workers", "params": {"num_workers": 8, "pin_memory": True}},
                                          {"intervention": "preload-dataset", "params": {"device": "cpu"}}], config)
    workers, preload = notes
    assert workers["applied"] and preload["applied"] and "superseded_by" not in preload
    assert workers["superseded_by"] == "preload-dataset" and "superseded" in workers["warning"]
    apply(cifar, diff)
    dl = kwargs(calls(ast.parse(cifar.read_text()), "DataLoader")[0])
    assert literal(dl["num_workers"]) == 0


def test_defer_syncs_patch_keeps_the_observed_item_reads_on_the_device(cifar):
    tree = ast.parse(cifar.read_text())
    lines = sorted(n.lineno for n in ast.walk(tree) if _is_call(n, "item"))
    config = config_for(cifar, "model", "inputs")
    config["item_calls"] = {"value": {"sites": {f"{cifar.name}:{ln}": {"calls": 5, "device": True} for ln in lines}},
                            "where": f"{cifar.name}:{lines[0]}"}
    diff, notes = make_patch(str(cifar), [{"intervention": "defer-syncs", "params": {}}], config)
    assert notes[0]["applied"] and notes[0].get("warning"), notes
    body = diff.splitlines()[2:]
    assert sum(ln.startswith("-") for ln in body) == sum(ln.startswith("+") for ln in body) == len(lines)
    apply(cifar, diff)
    text = cifar.read_text()
    assert ".item()" not in text.split("def main", 1)[1].split("if args.save", 1)[0]
    assert "running_loss += loss.detach()" in text
    out = run(cifar, "--steps", "3", "--batch-size", "8", "--num-samples", "64", "--device", "cpu", "--log-every", "1")
    assert "done: 3 steps" in out.stdout and "avg_loss" in out.stdout


def test_cuda_graphs_patch_sets_gradients_to_none(cifar):
    """The edited script compiles the model from its first step: with zero_grad(set_to_none=False)
    the gradients would be CUDA graph outputs that the next replay overwrites (such a patch
    fails in backward on an H100), so a reduce-overhead compile brings set_to_none=True."""
    config = config_for(cifar, "model", "inputs")
    diff, notes = make_patch(str(cifar), [{"intervention": "torch-compile", "params": {"mode": "reduce-overhead"}}], config)
    assert [n["intervention"] for n in notes] == ["torch-compile", "set-to-none"]
    assert notes[1]["applied"] and notes[1]["required_by"] == "torch-compile" and "CUDA graphs" in notes[1]["why"]
    apply(cifar, diff)
    tree = ast.parse(cifar.read_text())
    assert literal(kwargs(calls(tree, "zero_grad")[0])["set_to_none"]) is True
    # default mode, or set_to_none already asked for: nothing added
    _, plain = make_patch(str(cifar), [{"intervention": "torch-compile", "params": {}}], config)
    assert [n["intervention"] for n in plain] == ["torch-compile"]


def test_no_cudnn_benchmark_turns_off_a_dataparallel_scripts_own_benchmark_where_it_sets_it(tmp_path):
    """kuangliu's CIFAR trainer (the corpus) wraps its net in nn.DataParallel and sets
    cudnn.benchmark = True inside ``if device == 'cuda':`` (ADV124): that assignment becomes False;
    a script that never turns benchmark on has nothing to change (the default is off)."""
    corpus = ROOT / "benchmarks" / "corpus" / "cifar_kuangliu"
    script = _repo(tmp_path, corpus / "main.py")
    line = next(i for i, t in enumerate(script.read_text().splitlines(), 1) if t.strip() == "cudnn.benchmark = True")
    config = {"cudnn.benchmark": {"value": True, "where": f"main.py:{line}"},
              "data_parallel": {"value": {"class": "DataParallel"}, "where": f"main.py:{line - 1}"}}
    diff, notes = make_patch(str(script), [{"intervention": "no-cudnn-benchmark", "params": {}}], config)
    assert [n["applied"] for n in notes] == [True], notes
    assert [ln for ln in diff.splitlines() if ln.startswith(("+ ", "- "))] == \
        ["-    cudnn.benchmark = True", "+    cudnn.benchmark = False"]
    apply(script, diff)
    assert assigned(ast.parse(script.read_text()), "cudnn.benchmark") == [False]
    plain = _repo(tmp_path / "plain", FIXTURE)
    text = plain.read_text()
    _, notes = make_patch(str(plain), [{"intervention": "no-cudnn-benchmark", "params": {}}],
                          {"cudnn.benchmark": {"value": False, "where": None}})
    assert not notes[0]["applied"] and "turns cudnn.benchmark on" in notes[0]["reason"] and plain.read_text() == text
