"""Values followed at run time: each DataLoader argument's chain read up the live call stack
(advisor.runtime.provenance) and the patch changing the value where the chain ends
(advisor.patch.provenance): the command line for an option (given: its word changed; not
given: the option added), the literal where it is written, a Hydra override word, the YAML an
OmegaConf config read.

Each layout runs for real (tests/provenance_harness.py: the script under python, its
DataLoaders followed by the runner's own walker), the chains go to make_patch as the child's
config holds them; one whole ``advisor analyze --apply`` runs the cloud-sample trainer
(tests/fixtures/scripts/cloud_trainer) and its verification observes the new worker count.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from advisor import verify
from advisor.fixes import make_patch

ROOT = Path(__file__).resolve().parents[1]
HARNESS = ROOT / "tests" / "provenance_harness.py"
CLOUD = ROOT / "tests" / "fixtures" / "scripts" / "cloud_trainer"
WORKERS = [{"intervention": "dataloader-workers", "params": {"num_workers": 8}}]


def _project(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "proj"
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text).lstrip())
    return root


def _run(root: Path, script: str, argv: list[str], env: dict | None = None) -> dict:
    """The script run as python runs it, its DataLoaders followed: {"loaders", "cli_options"}."""
    out = root.parent / "followed.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    proc = subprocess.run([sys.executable, str(HARNESS), str(out), script, *argv], cwd=root, capture_output=True,
                          text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


def _patch(root: Path, script: str, argv: list[str], loader: dict, fixes=WORKERS, extra: dict | None = None):
    config = {"dataloader": loader, **(extra or {})}
    diff, notes = make_patch(str(root / script), fixes, config, cwd=str(root), argv=argv)
    return diff, notes[0], verify.recommended_command(script, argv, notes)


def _added(diff: str) -> str:
    return "\n".join(line for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++"))


def _kinds(chain: list[dict]) -> list[str]:
    return [link["kind"] for link in chain]


# ----------------------------------------------------------------------------- the cloud sample

@pytest.fixture()
def cloud(tmp_path):
    root = tmp_path / "proj"
    shutil.copytree(CLOUD, root)
    return root


@pytest.mark.parametrize("argv", [["--numworkers", "1"], ["--numworkers=1"], ["--numw", "1"]])
def test_cloud_trainer_given_flag_changes_on_the_command_line(cloud, argv):
    """--numworkers 1 → Train().run(num_workers=args.numworkers) → run(self, num_workers=None)
    with ``if num_workers is None: num_workers = cpu_count()`` → DataLoader(num_workers=...):
    the static chain stops at the reassigned parameter; the run-time chain reaches the option
    the user gave, and the command passes the new value (--numw: argparse's prefix of it)."""
    run = _run(cloud, "main.py", [*argv, "--epochs", "1"])
    chain = run["loaders"][0]["provenance"]["num_workers"]
    assert _kinds(chain) == ["arg", "param", "arg", "option"], chain
    assert chain[1]["guard"] and chain[1]["reassigned"].endswith("trainer.py:32"), chain
    assert chain[-1]["given"] and chain[-1]["dest"] == "numworkers", chain
    diff, note, command = _patch(cloud, "main.py", [*argv, "--epochs", "1"], run["loaders"][0])
    assert note["applied"], note
    assert "num_workers=8" not in _added(diff)           # the code keeps the user's expression
    assert note["sources"]["num_workers"] == ["trainer.py:33", "trainer.py:30", "main.py:19", "argv:--numworkers"]
    assert note["followed"] == {"num_workers": "run time"}
    want = {"--numworkers": ["--numworkers", "8"], "--numworkers=1": ["--numworkers=8"], "--numw": ["--numw", "8"]}
    assert command == ["python", "main.py", *want[argv[0]], "--epochs", "1"], command


def test_cloud_trainer_flag_not_given_is_added_to_the_command(cloud):
    """The same layout run without --numworkers: the value came from cpu_count() under the
    None test, which any value passed skips; the command adds the option, no literal is
    written at the call."""
    run = _run(cloud, "main.py", [])
    chain = run["loaders"][0]["provenance"]["num_workers"]
    assert chain[-1]["kind"] == "option" and not chain[-1]["given"], chain
    diff, note, command = _patch(cloud, "main.py", [], run["loaders"][0])
    assert note["argv_changes"] == [{"flag": "--numworkers", "from": None, "to": "8"}], note
    assert "num_workers=8" not in _added(diff) and "default=8" not in _added(diff)
    assert command == ["python", "main.py", "--numworkers", "8"]


def test_cloud_trainer_batch_size_from_its_flag(cloud):
    """batch-size's factor on a batch that comes from --batchsize: the command passes the larger
    batch (the option's own value times the factor), the call is not rewritten."""
    argv = ["--batchsize", "16", "--numworkers", "0"]
    loader = _run(cloud, "main.py", argv)["loaders"][0]
    diff, note, command = _patch(cloud, "main.py", argv, loader,
                                 fixes=[{"intervention": "batch-size", "params": {"factor": 2}}])
    assert not diff and note["argv_changes"] == [{"flag": "--batchsize", "from": "16", "to": "32"}], (note, diff)
    assert command == ["python", "main.py", "--batchsize", "32", "--numworkers", "0"]


def test_static_chain_alone_misses_the_cloud_trainer(cloud):
    """What the run-time chain fixes: the static chain from the call stops at the parameter the
    method reassigns, and the note can only ask for the value (the issue's "did not take
    effect")."""
    loader = _run(cloud, "main.py", ["--numworkers", "1"])["loaders"][0]
    loader.pop("provenance")
    _diff, note, command = _patch(cloud, "main.py", ["--numworkers", "1"], loader)
    assert not note.get("argv_changes") and "give it 8" in note.get("warning", ""), note
    assert command == ["python", "main.py", "--numworkers", "1"]


# ----------------------------------------------------------------------------- layouts

def test_kwargs_passed_through_two_functions(tmp_path):
    root = _project(tmp_path, {"train.py": """
        import argparse
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        def make_loader(ds, **kw):
            return DataLoader(ds, batch_size=2, **kw)

        def build(ds, split, **loader_kwargs):
            return make_loader(ds, **loader_kwargs)

        p = argparse.ArgumentParser()
        p.add_argument("-j", "--workers", type=int, default=0)
        args = p.parse_args()
        build(TensorDataset(torch.randn(8, 2)), "train", num_workers=args.workers, drop_last=True)
        """})
    run = _run(root, "train.py", ["-j1"])
    loader = run["loaders"][0]
    chain = loader["provenance"]["num_workers"]
    assert _kinds(chain) == ["kwargs", "param", "kwargs", "param", "arg", "option"], chain
    diff, note, command = _patch(root, "train.py", ["-j1"], loader)
    assert note["argv_changes"] == [{"flag": "-j", "from": "1", "to": "8"}], note
    assert command == ["python", "train.py", "-j8"]
    # no name at the call to test: persistent workers would raise for a count of 0
    assert "persistent_workers" not in _added(diff) and "persistent_workers" in note["warning"]


def test_partial_of_the_dataloader(tmp_path):
    root = _project(tmp_path, {"train.py": """
        import argparse
        import functools
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        p = argparse.ArgumentParser()
        p.add_argument("--workers", type=int, default=0)
        args = p.parse_args()
        loader_fn = functools.partial(DataLoader, batch_size=4, num_workers=args.workers)
        loader = loader_fn(TensorDataset(torch.randn(8, 2)))
        """})
    loader = _run(root, "train.py", [])["loaders"][0]
    assert _kinds(loader["provenance"]["num_workers"]) == ["partial", "option"]
    diff, note, command = _patch(root, "train.py", [], loader)
    assert note["argv_changes"] == [{"flag": "--workers", "from": None, "to": "8"}], note
    assert command == ["python", "train.py", "--workers", "8"]
    assert "default=8" not in diff and "num_workers=8" not in _added(diff), diff


def test_dataclass_config_field_default_is_edited_where_it_is_declared(tmp_path):
    root = _project(tmp_path, {
        "config.py": """
            from dataclasses import dataclass, field


            @dataclass
            class DataConfig:
                batch_size: int = 4
                num_workers: int = 1
                pin: bool = field(default=False)
            """,
        "train.py": """
            import torch
            from torch.utils.data import DataLoader, TensorDataset
            from config import DataConfig

            def loaders(cfg: DataConfig):
                return DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=cfg.batch_size,
                                  num_workers=cfg.num_workers)

            loaders(DataConfig())
            """})
    loader = _run(root, "train.py", [])["loaders"][0]
    chain = loader["provenance"]["num_workers"]
    assert _kinds(chain) == ["arg", "field", "literal"] and chain[-1]["where"] == "config.py:7", chain
    diff, note, command = _patch(root, "train.py", [], loader)
    assert "-    num_workers: int = 1" in diff and "+    num_workers: int = 8" in diff, diff
    assert "num_workers=8" not in _added(diff) and command == ["python", "train.py"]
    assert note["sources"]["num_workers"][-1] == "config.py:7", note


def test_attrs_config_field_default(tmp_path):
    pytest.importorskip("attrs")
    root = _project(tmp_path, {"train.py": """
        import attrs
        import torch
        from torch.utils.data import DataLoader, TensorDataset


        @attrs.define
        class Loader:
            workers: int = 1
            batch: int = attrs.field(default=4)


        cfg = Loader()
        DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=cfg.batch, num_workers=cfg.workers)
        """})
    loader = _run(root, "train.py", [])["loaders"][0]
    assert _kinds(loader["provenance"]["num_workers"]) == ["arg", "field", "literal"], loader
    assert _kinds(loader["provenance"]["batch_size"]) == ["arg", "field", "literal"], loader
    diff, _note, _command = _patch(root, "train.py", [], loader)
    assert "+    workers: int = 8" in diff.splitlines(), diff


def test_dataclass_filled_from_the_command_line(tmp_path):
    """``Config(num_workers=args.workers)``: the field's value is the option's, given."""
    root = _project(tmp_path, {"train.py": """
        import argparse
        from dataclasses import dataclass
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        @dataclass
        class Config:
            num_workers: int = 0

        p = argparse.ArgumentParser()
        p.add_argument("--workers", type=int, default=0)
        cfg = Config(num_workers=p.parse_args().workers)
        DataLoader(TensorDataset(torch.randn(8, 2)), num_workers=cfg.num_workers)
        """})
    loader = _run(root, "train.py", ["--workers", "1"])["loaders"][0]
    assert _kinds(loader["provenance"]["num_workers"])[-1] == "option"
    _diff, note, command = _patch(root, "train.py", ["--workers", "1"], loader)
    assert command == ["python", "train.py", "--workers", "8"], note


def test_dict_config_passed_to_a_function(tmp_path):
    root = _project(tmp_path, {"train.py": """
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        CONFIG = {"batch_size": 4, "num_workers": 1}
        OTHER = {"num_workers": 3}

        def make(cfg):
            return DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=cfg["batch_size"],
                              num_workers=cfg["num_workers"])

        make(CONFIG)
        """})
    loader = _run(root, "train.py", [])["loaders"][0]
    chain = loader["provenance"]["num_workers"]
    assert chain[-1]["kind"] == "literal" and chain[-1]["where"] == "train.py:4", chain
    diff, _note, _command = _patch(root, "train.py", [], loader)
    # the dict the run used, not the other one holding the same key
    assert '+CONFIG = {"batch_size": 4, "num_workers": 8}' in diff and 'OTHER = {"num_workers": 8}' not in diff, diff


def test_library_loader_factory(tmp_path):
    """A library's factory (installed: site-packages) makes the DataLoader from the user's
    arguments: the call is not editable, the value changes where the user gives it; where
    the user gives nothing, the argument is passed at the user's call of the factory."""
    lib = tmp_path / "venv" / "lib" / "site-packages" / "looplib"
    lib.mkdir(parents=True)
    (lib / "__init__.py").write_text(textwrap.dedent("""
        from torch.utils.data import DataLoader


        def build_loader(dataset, batch_size=2, workers=0, **extra):
            opts = dict(batch_size=batch_size, num_workers=workers)
            opts.update(extra)
            return DataLoader(dataset, **opts)
        """))
    root = _project(tmp_path, {"train.py": """
        import argparse
        import torch
        from torch.utils.data import TensorDataset
        from looplib import build_loader

        p = argparse.ArgumentParser()
        p.add_argument("--workers", type=int, default=0)
        args = p.parse_args()
        ds = TensorDataset(torch.randn(8, 2))
        train = build_loader(ds, workers=args.workers)
        val = build_loader(ds, batch_size=4)
        """})
    env = {"PYTHONPATH": f"{ROOT}:{lib.parent}"}
    run = _run(root, "train.py", ["--workers", "1"], env)
    train, val = run["loaders"]
    assert train["provenance"]["num_workers"][0].get("lib"), train
    _diff, note, command = _patch(root, "train.py", ["--workers", "1"], train)
    assert note["applied"] and command == ["python", "train.py", "--workers", "8"], note
    diff, note, command = _patch(root, "train.py", ["--workers", "1"], val)
    assert note["applied"], note
    assert "+val = build_loader(ds, batch_size=4, workers=8)" in diff.splitlines(), diff
    assert command == ["python", "train.py", "--workers", "1"]


def test_value_kept_on_self_and_a_module_constant(tmp_path):
    root = _project(tmp_path, {
        "settings.py": "WORKERS = 2\n",
        "train.py": """
            import torch
            from torch.utils.data import DataLoader, TensorDataset
            from settings import WORKERS


            class Trainer:
                def __init__(self, workers):
                    self.workers = workers

                def loader(self):
                    return DataLoader(TensorDataset(torch.randn(8, 2)), num_workers=self.workers)


            Trainer(WORKERS).loader()
            """})
    loader = _run(root, "train.py", [])["loaders"][0]
    chain = loader["provenance"]["num_workers"]
    assert chain[-1]["kind"] == "literal" and chain[-1]["where"] == "settings.py:1", chain
    diff, _note, _command = _patch(root, "train.py", [], loader)
    assert "+WORKERS = 8" in diff.splitlines() and "num_workers=8" not in _added(diff), diff


# ----------------------------------------------------------------------------- OmegaConf, Hydra

def test_omegaconf_yaml_key_is_edited_in_the_file_the_run_read(tmp_path):
    pytest.importorskip("omegaconf")
    root = _project(tmp_path, {
        "conf/base.yaml": """
            data:
              batch_size: 4
              num_workers: 1
            model:
              num_workers: 1
            """,
        "train.py": """
            import torch
            from omegaconf import OmegaConf
            from torch.utils.data import DataLoader, TensorDataset

            cfg = OmegaConf.load("conf/base.yaml")
            DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=cfg.data.batch_size,
                       num_workers=cfg.data.num_workers)
            """})
    loader = _run(root, "train.py", [])["loaders"][0]
    end = loader["provenance"]["num_workers"][-1]
    assert end["kind"] == "config" and end["key"] == "data.num_workers" and not end["given"], end
    config = {"config_files": {"value": [str(root / "conf" / "base.yaml")], "where": None}}
    diff, note, command = _patch(root, "train.py", [], loader, extra=config)
    assert note["applied"], note
    assert "+  num_workers: 8" in diff and diff.count("+  num_workers") == 1, diff


HYDRA_APP = """
    import hydra
    import torch
    from torch.utils.data import DataLoader, TensorDataset


    @hydra.main(config_path="conf", config_name="config", version_base=None)
    def main(cfg):
        DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=cfg.data.batch_size,
                   num_workers=cfg.data.num_workers)


    if __name__ == "__main__":
        main()
    """


@pytest.mark.parametrize("argv", [["data.num_workers=1"], []])
def test_hydra_override_word(tmp_path, argv):
    """Under Hydra the command line's override wins over every file: a word the user gave is
    changed, else one is added."""
    pytest.importorskip("hydra")
    root = _project(tmp_path, {"conf/config.yaml": "data:\n  batch_size: 4\n  num_workers: 0\n",
                               "app.py": HYDRA_APP})
    loader = _run(root, "app.py", [*argv, "hydra.run.dir=."])["loaders"][0]
    end = loader["provenance"]["num_workers"][-1]
    assert end["kind"] == "config" and end["cli"] == "hydra" and end["given"] == bool(argv), end
    diff, note, command = _patch(root, "app.py", [*argv, "hydra.run.dir=."], loader)
    assert "num_workers=8" not in _added(diff) and "num_workers: 8" not in diff, diff
    assert command == ["python", "app.py", "data.num_workers=8", "hydra.run.dir=."] if argv else \
        command == ["python", "app.py", "hydra.run.dir=.", "data.num_workers=8"], command


# ----------------------------------------------------------------------------- end to end

def test_cloud_trainer_end_to_end(cloud, tmp_path):
    """``advisor analyze --apply dataloader-workers`` on the cloud sample run with --numworkers 1:
    patch.command passes the trialled count, the code's worker expression is untouched, and
    the verification, run with that command, observes the new count."""
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "advisor", "analyze", "--no-trials", "--apply",
                           "dataloader-workers:num_workers=2", "--steps", "6", "--min-time", "0", "--out", str(out),
                           "main.py", "--numworkers", "1", "--epochs", "3"],
                          cwd=cloud, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((out / "run.json").read_text())
    chain = doc["config"]["dataloader"]["provenance"]["num_workers"]
    assert chain[-1]["kind"] == "option" and chain[-1]["given"], chain
    patch = doc["patch"]
    assert patch["command"] == ["python", "main.py", "--numworkers", "2", "--epochs", "3"], patch
    note = patch["notes"][0]
    assert note["argv_changes"] == [{"flag": "--numworkers", "from": "1", "to": "2"}], note
    text = (out / "fixes.patch").read_text()
    assert "num_workers=2" not in _added(text)
    ver = patch["verification"]
    assert ver["argv"] == ["--numworkers", "2", "--epochs", "3"], ver
    check = next(c for c in ver["checks"] if c["fix"] == "dataloader-workers")
    assert check["took_effect"] and check["observed"] == "num_workers=2", check
    assert doc["config"]["dataloader"]["source"]["num_workers"][-1] == "argv:--numworkers"


def test_options_given_are_read_as_argparse_matches_them():
    """cli_seen: which options the arguments gave, word by word as argparse reads them (the parse
    itself is not repeated)."""
    import argparse

    from advisor.runner._util import Patcher
    from advisor.runtime.cli_seen import CliSeen

    seen, patches = CliSeen(), Patcher()
    seen.install(patches)
    try:
        p = argparse.ArgumentParser()
        p.add_argument("--numworkers", type=int, default=None)
        p.add_argument("-j", "--jobs", type=int, default=2)
        p.add_argument("--amp", action="store_true")
        p.add_argument("--lr", type=float, default=0.1)
        p.add_argument("--out", default="o")
        p.add_argument("rest", nargs="*")
        ns = p.parse_args(["--numw", "1", "-j4", "--amp", "--", "--lr", "3"])
    finally:
        patches.undo()
    got = {k: seen.of_namespace(ns, k) for k in ("numworkers", "jobs", "amp", "lr", "out")}
    assert (got["numworkers"].given, got["numworkers"].flag, got["numworkers"].value) == (True, "--numw", "1")
    assert (got["jobs"].flag, got["jobs"].value) == ("-j", "4")
    assert got["amp"].given and got["amp"].action == "store_true" and got["amp"].value is None
    assert not got["lr"].given and got["lr"].default == 0.1      # after "--": a positional's word
    assert not got["out"].given and seen.matching("jobs", 4) is got["jobs"]


def test_a_parser_fed_its_own_list_is_not_changed_on_the_command_line(tmp_path):
    """``parser.parse_args(["--workers", "1"])``: the option comes from the script's own list,
    not the command line, so the command cannot change it: the static chain edits the code."""
    root = _project(tmp_path, {"train.py": """
        import argparse
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        p = argparse.ArgumentParser()
        p.add_argument("--workers", type=int, default=0)
        args = p.parse_args(["--workers", "1"])
        DataLoader(TensorDataset(torch.randn(8, 2)), num_workers=args.workers)
        """})
    run = _run(root, "train.py", [])
    end = run["loaders"][0]["provenance"]["num_workers"][-1]
    assert end["kind"] == "option" and end["from_argv"] is False, end
    config = {"cli_options": {"value": run["cli_options"], "where": None}}
    diff, note, command = _patch(root, "train.py", [], run["loaders"][0], extra=config)
    assert command == ["python", "train.py"] and not note.get("argv_changes"), note
