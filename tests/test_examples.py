"""The example training scripts run standalone, on the CPU, with small arguments.

Each runs as `python3 examples/X.py ...` in a subprocess (as a user, or advisor, would run it)
with a temporary working directory, so the tests also check they write nothing to the cwd.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"

LOSS_RE = re.compile(r"\bloss (-?[0-9.]+(?:e[-+]?\d+)?|nan|inf)\b")
RATE_RE = re.compile(r"([0-9.]+) samples/s")


def run_example(name, *args, cwd, timeout=240, env=None):
    env = dict(os.environ if env is None else env, PYTHONUNBUFFERED="1")
    proc = subprocess.run([sys.executable, str(EXAMPLES / name), "--device", "cpu", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"{name} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def losses(stdout):
    return [float(m.group(1)) for line in stdout.splitlines() if line.startswith("epoch ")
            for m in [LOSS_RE.search(line)] if m]


def samples_per_s(stdout):
    done = [line for line in stdout.splitlines() if line.startswith("done:")]
    assert done, stdout
    m = RATE_RE.search(done[-1])
    assert m, done[-1]
    return float(m.group(1))


def assert_decreased(ls, k=5):
    assert len(ls) >= 2 * k, ls
    first, last = sum(ls[:k]) / k, sum(ls[-k:]) / k
    assert last < 0.8 * first, f"loss did not fall: first {k} mean {first:.3f}, last {k} mean {last:.3f}: {ls}"


@pytest.mark.parametrize("name,extra", [("cifar_resnet.py", ()), ("cifar_resnet_tuned.py", ()),
                                        ("cifar_resnet_tuned.py", ("--data", "workers", "--workers", "2"))])
def test_cifar_resnet_learns(name, extra, tmp_path):
    out = run_example(name, "--steps", "30", "--batch-size", "32", "--log-every", "1", *extra, cwd=tmp_path)
    ls = losses(out)
    assert len(ls) == 30
    assert_decreased(ls)
    assert samples_per_s(out) > 0
    assert list(tmp_path.iterdir()) == []


def test_cifar_resnet_save(tmp_path):
    import torch

    ckpt = tmp_path / "ckpt.pt"
    run_example("cifar_resnet.py", "--steps", "2", "--batch-size", "8", "--num-samples", "64",
                "--save", str(ckpt), cwd=tmp_path)
    state = torch.load(ckpt, weights_only=True)
    assert state["step"] == 2 and "fc.weight" in state["model"]


def test_mnist_cnn_learns(tmp_path):
    out = run_example("mnist_cnn.py", "--steps", "40", "--log-every", "2", cwd=tmp_path)
    ls = losses(out)
    assert len(ls) == 20
    assert_decreased(ls, k=4)
    assert "test: average loss" in out  # 40 steps of 64 = one full epoch by default on CPU
    assert list(tmp_path.iterdir()) == []


def test_imagefolder_runs_and_cleans_up(tmp_path):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    out = run_example("imagefolder.py", "--steps", "20", "--batch-size", "16", "--image-size", "48",
                      "--num-images", "160", "--log-every", "1", cwd=tmp_path,
                      env=dict(os.environ, TMPDIR=str(tmpdir)))
    ls = losses(out)
    assert len(ls) == 20
    assert_decreased(ls, k=4)
    assert [p.name for p in tmp_path.iterdir()] == ["tmp"]
    # (torch itself may leave a torchinductor_<user> cache dir in TMPDIR)
    assert not list(tmpdir.glob("imagefolder-*")), "the generated JPEGs were not removed"


def test_imagefolder_out_keeps_and_reuses_data(tmp_path):
    out_dir = tmp_path / "out"
    args = ["--steps", "2", "--batch-size", "4", "--image-size", "32", "--num-images", "20",
            "--classes", "4", "--out", str(out_dir)]
    run_example("imagefolder.py", *args, cwd=tmp_path)
    jpegs = sorted(out_dir.glob("imagefolder-data/class_*/*.jpg"))
    assert len(jpegs) == 20
    mtimes = [p.stat().st_mtime_ns for p in jpegs]
    run_example("imagefolder.py", *args, cwd=tmp_path)
    assert [p.stat().st_mtime_ns for p in jpegs] == mtimes  # reused, not rewritten


def test_slow_loader_workers_load_the_same_batches(tmp_path):
    """--workers spreads the loading over processes and changes nothing else: the same batches
    in the same order, so the same losses step for step (each sample is made from the seed
    and its index). How much faster two workers are is a figure, printed by
    benchmarks/slow_loader_workers.py, not asserted here."""
    common = ["--steps", "20", "--batch-size", "16", "--sleep-ms", "4", "--log-every", "1"]
    serial = run_example("slow_loader.py", "--workers", "0", *common, cwd=tmp_path)
    parallel = run_example("slow_loader.py", "--workers", "2", *common, cwd=tmp_path)
    assert "workers=0" in serial and "workers=2" in parallel
    assert len(losses(serial)) == 20 and losses(parallel) == losses(serial), (losses(serial), losses(parallel))
    assert samples_per_s(serial) > 0 and samples_per_s(parallel) > 0
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["cifar_resnet.py", "cifar_resnet_tuned.py", "mnist_cnn.py",
                                  "imagefolder.py", "slow_loader.py"])
def test_common_flags(name, capsys):
    """Every example takes the same basic flags (parsed in-process: no torch import per test)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"example_{Path(name).stem}", EXAMPLES / name)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # defines main() only: `if __name__ == "__main__"` guards it
    with pytest.raises(SystemExit):
        mod.parse_args(["--help"])
    out = capsys.readouterr().out
    for flag in ("--device", "--batch-size", "--steps", "--epochs", "--lr", "--seed", "--log-every", "--save"):
        assert flag in out, f"{name} lacks {flag}"
    args = mod.parse_args(["--device", "cpu"])
    assert args.batch_size <= 64 and args.lr > 0


def test_gpt_lm_learns(tmp_path):
    """The nanoGPT-style example: the loss falls from log(vocab) as the model learns the
    synthetic Markov chain's transitions (a one-layer model on the CPU)."""
    out = run_example("gpt_lm.py", "--max-iters", "400", "--log-interval", "50", "--vocab-size", "64",
                      "--lr", "3e-3", "--warmup-iters", "10", "--tokens", "50000", "--grad-accum", "2",
                      "--batch-size", "8", "--n-layer", "1", "--eval-interval", "200", "--eval-iters", "2",
                      cwd=tmp_path)
    ls = [float(line.split("loss ")[1].split(",")[0]) for line in out.splitlines() if line.startswith("iter ")]
    assert len(ls) == 8
    assert ls[-1] < 0.85 * ls[0], ls
    assert "val loss" in out
    assert list(tmp_path.iterdir()) == []


def test_gpt_lm_with_manual_attention_learns_the_same_way(tmp_path):
    """--attention manual (q @ k^T, causal mask, softmax, @ v) computes what SDPA does: the same
    seed gives the same first losses."""
    common = ("--max-iters", "21", "--log-interval", "10", "--vocab-size", "64", "--tokens", "20000",
              "--batch-size", "4", "--n-layer", "1", "--eval-interval", "1000", "--grad-accum", "1")
    ls = {}
    for attention in ("sdpa", "manual"):
        out = run_example("gpt_lm.py", *common, "--attention", attention, cwd=tmp_path)
        ls[attention] = [float(line.split("loss ")[1].split(",")[0]) for line in out.splitlines() if line.startswith("iter ")]
    assert len(ls["manual"]) == 3 and ls["manual"] == pytest.approx(ls["sdpa"], rel=1e-3), ls
    assert list(tmp_path.iterdir()) == []


def test_gpt2_trainer_padded_fine_tunes_through_the_trainer(tmp_path):
    """The Trainer fine-tune: texts padded to the model's length (most tokens padding), eager
    attention; the Trainer's loss falls and nothing is left in the cwd (its output dir is a
    temporary one)."""
    out = run_example("gpt2_trainer_padded.py", "--n-layer", "2", "--n-embd", "64", "--n-head", "4",
                      "--max-length", "64", "--max-steps", "60", "--texts", "2000", "--lr", "1e-3",
                      "--vocab-size", "512", cwd=tmp_path)
    pad = re.search(r"(\d+)% of the tokens are padding", out)
    assert pad and 50 <= int(pad.group(1)) <= 80, out[-2000:]   # about 70% at 512 tokens, less at 64
    done = re.search(r"done: 60 steps, loss ([0-9.]+), ([0-9.]+) samples/s", out)
    assert done and float(done.group(1)) < 6.2 and float(done.group(2)) > 0, out[-2000:]   # below log(512)
    assert list(tmp_path.iterdir()) == []


def test_llama_from_config_learns(tmp_path):
    out = run_example("llama_from_config.py", "--hidden", "64", "--layers", "2", "--heads", "4", "--seq", "64",
                      "--batch-size", "4", "--steps", "40", "--vocab-size", "512", "--lr", "3e-3", cwd=tmp_path)
    assert "attention eager" in out
    ls = [float(line.split("loss ")[1]) for line in out.splitlines() if line.startswith("step ")]
    assert len(ls) == 40
    assert_decreased(ls)
    assert re.search(r"done: 40 steps, [0-9]+ tokens/s", out)
    assert list(tmp_path.iterdir()) == []
