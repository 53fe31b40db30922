"""How far from the limit: one step's FLOPs counted in the baseline, the data-free ceiling's
cached batch, and MFU against the dtype's peak."""

from __future__ import annotations

import pytest
from test_runner_support import write

from advisor import headroom, roofline
from advisor.runner.parent import run_child

MLP = """
    import torch
    data = torch.utils.data.TensorDataset(torch.randn(400, 64), torch.randint(0, 4, (400,)))
    loader = torch.utils.data.DataLoader(data, batch_size=20, shuffle=True, num_workers=1)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 4))
    opt = torch.optim.Adam(model.parameters())
    seen = []
    for epoch in range(100):
        n = 0
        for x, y in loader:
            seen.append(x[0, 0].item()); n += 1
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(); loss.backward(); opt.step()
        assert n == 20, n   # the loader's length, whatever serves it
        if epoch == 1 and CHECK_CACHED:
            assert len(set(seen)) == 1, "one cached batch, every step"
"""


def _spec(tmp_path, name, **kw):
    return {"script": str(tmp_path / "train.py"), "argv": ["train.py"], "cwd": str(tmp_path),
            "run_dir": str(tmp_path / name), "run_name": name, "warmup_steps": 5, "profile_steps": 0,
            "measure_steps": 4, "record_memory": False, "with_stack": False, **kw}


def test_one_warm_up_steps_flops_are_counted_exactly(tmp_path):
    write(tmp_path / "train.py", MLP.replace("CHECK_CACHED", "False"))
    res = run_child(_spec(tmp_path, "baseline", count_flops=True), timeout=120, step_timeout=60)
    assert res["status"] == "complete", res["incomplete_reasons"]
    # forward 2*B*(64*256 + 256*4); backward: the second layer's input and weight grads, the first's weight grad
    b = 20
    want = 2 * b * (64 * 256 + 256 * 4) + 2 * (2 * b * 256 * 4) + 2 * b * 64 * 256
    assert res["flops"] == {"per_step": want, "step": 3, "why_not": None}
    assert headroom.flops_per_sample(res) == pytest.approx(want / b)
    # trials do not count (the baseline's FLOPs per sample serve every run)
    trial = run_child(_spec(tmp_path, "trial"), timeout=120, step_timeout=60)
    assert trial.get("flops") is None


def test_the_ceiling_serves_one_cached_batch_for_the_loaders_length(tmp_path):
    write(tmp_path / "train.py", MLP.replace("CHECK_CACHED", "True"))
    res = run_child(_spec(tmp_path, "ceiling", measure_steps=30, interventions=[{"name": "cached-batch", "params": {}}]),
                    timeout=120, step_timeout=60)
    assert res["status"] == "complete", res["incomplete_reasons"]
    assert (res["batch_size"], res["batch_size_source"]) == (20, "dataloader")
    assert res["batches_per_epoch"] == 20 and res["exit"]["exception"] is None


def test_mfu_of_the_baseline_the_kept_fixes_and_the_ceiling():
    doc = {"environment": {"gpu_name": "NVIDIA H100 80GB HBM3"}, "config": {},
           "measurement": {"samples_per_s": 1000.0},
           "trials": [{"name": "01-amp", "status": "accepted", "samples_per_s": 4000.0, "compute_dtype": "bf16"},
                      {"name": "ceiling-data-free", "ceiling": True, "apart": True, "status": "bound",
                       "samples_per_s": 5000.0, "compute_dtype": "bf16"}]}
    child = {"flops": {"per_step": 64 * 3e9, "step": 3}, "batch_size": 64, "step_counts": [[1, 1, 1]]}
    r = headroom.summary(doc, child)
    assert r["flops_per_sample"] == pytest.approx(3e9)
    assert r["baseline"]["dtype"] == "fp32" and r["baseline"]["achieved_tflops"] == pytest.approx(3.0)
    # one yardstick, the bf16 peak, for every run: the faster stack reads higher than the baseline
    bf16, fp32 = (roofline.peak_tflops("NVIDIA H100 80GB HBM3", d) for d in ("bf16", "fp32"))
    assert r["baseline"]["mfu"] == pytest.approx(3.0 / bf16) and r["baseline"]["yardstick_tflops"] == bf16
    assert r["baseline"]["dtype_mfu"] == pytest.approx(3.0 / fp32) and r["baseline"]["peak_tflops"] == fp32
    assert r["stack"]["mfu"] == pytest.approx(12.0 / bf16) and r["stack"]["dtype_mfu"] == r["stack"]["mfu"]
    assert r["stack"]["mfu"] > r["baseline"]["mfu"]
    assert r["ceiling"]["kept_fraction"] == pytest.approx(0.8)
    text = "\n".join(headroom.lines(r))
    assert "3 GFLOP a sample" in text and "MFU" in text and "the kept fixes reach 80% of it" in text
    assert f"baseline: 3 TFLOP/s achieved in fp32 (MFU {3.0 / bf16 * 100:.1f}% of the {bf16:.0f} bf16 peak; " \
           f"{3.0 / fp32 * 100:.1f}% of the {fp32:.1f} fp32 peak)" in text, text
    assert f"(MFU {12.0 / bf16 * 100:.1f}%)" in text
    assert headroom.lines({"flops_per_sample": None, "why_not": "the model is compiled"}) == \
        ["FLOPs not counted: the model is compiled"]
