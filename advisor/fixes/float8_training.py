"""``float8-training``: torchao's float8 training, the large linear layers' GEMMs on the FP8
tensor cores of an Ada, Hopper or Blackwell GPU (twice the bf16 peak), scaled dynamically per
tensor. A numerics change: measured apart, on top of the kept fixes, with the loss compared over
the trial. torchao's casts fuse only under torch.compile: in eager mode they are kernels of their
own, so it pays mostly where the kept stack compiles the model.

The whole fix lives here: the trial's run-time part, the edit (advisor/patch/float8.py writes the
same function the trial runs: runtime/float8_source.py), and the check.
"""

from __future__ import annotations

import importlib.util

from advisor import roofline
from advisor.fixes.base import Fix, value

FP8_CAPABILITY = (8, 9)   # FP8 tensor cores: Ada (8.9), Hopper (9.0), Blackwell (10.x, 12.x)


def fp8_tensor_cores(environment: dict) -> bool | None:
    """Whether the GPU has FP8 tensor cores: by its compute capability, else by its name's
    datasheet peaks (roofline); None when neither tells."""
    cap = str(environment.get("compute_capability") or "")
    if cap:
        try:
            major, minor = (int(x) for x in cap.split(".")[:2])
            return (major, minor) >= FP8_CAPABILITY
        except ValueError:
            pass
    name = environment.get("gpu_name")
    if not name:
        return None
    if roofline.peak_tflops(name, "fp8"):
        return True
    return False if roofline.peak_tflops(name, "bf16") or roofline.peak_tflops(name, "fp16") else None


def large_for_fp8(k: int, n: int) -> bool:
    """torchao's tensorwise filter (torchao.float8.float8_linear_utils._auto_filter_for_tensorwise),
    read here without torch: both dimensions multiples of 16, and not K <= 4096 with N <= 1024
    (smaller GEMMs ran slower in FP8 than in bf16 in torchao's H100 tables)."""
    return k % 16 == 0 and n % 16 == 0 and not (k <= 4096 and n <= 1024)


class Float8Training(Fix):
    name = "float8-training"
    changes_numerics = True   # FP8 inputs, weights and gradients: the loss curve is compared
    apart = True   # a numerics change of its own: run on top of the final stack (trials/apart.py)
    editor = "advisor.patch.float8:float8_training"
    where_key = "model"

    def describe(self, params):
        return "torchao float8 training: the large linear layers' GEMMs in FP8 (dynamic tensorwise scales)"

    def not_applicable(self, config, environment, params):
        if not environment.get("gpu_count"):
            return "FP8 GEMMs need the FP8 tensor cores of a CUDA GPU (compute capability 8.9 or newer)"
        has = fp8_tensor_cores(environment)
        if not has:
            gpu = environment.get("gpu_name") or "the GPU"
            return (f"{gpu} has no FP8 tensor cores (compute capability 8.9 or newer: Ada, Hopper, Blackwell)"
                    if has is False else f"cannot tell whether {gpu} has FP8 tensor cores")
        if importlib.util.find_spec("torchao") is None:
            return "torchao is not installed (pip install torchao)"
        layers = value(config, "linears")
        if not layers.get("count"):
            return "the model has no nn.Linear layers"
        gemms = layers.get("gemms")
        if gemms is not None and not any(large_for_fp8(g["k"], g["n"]) for g in gemms):
            return "no linear layer is large enough for FP8 to pay (torchao's filter: K > 4096 or N > 1024)"
        return None

    def apply(self, params):
        """At the model's first training call, before it runs (and before torch.compile traces
        it): its large linear layers become torchao's Float8Linear. Their weights stay the
        same Parameter objects: the optimizer made before goes on updating them."""
        from advisor.runtime.float8_source import FLOAT8
        from advisor.runtime.patching import at_first_training_call, source_functions

        at_first_training_call(source_functions(FLOAT8, self.name)["_float8_training"])

    def apart_note(self, stack):
        note = super().apart_note(stack)
        if "torch-compile" not in stack:
            note += ("; the kept fixes do not compile the model, so torchao's casts ran as kernels of their "
                     "own: FP8 pays mostly under torch.compile")
        return note

    def lightning_edit(self, ctx, fix, params, trainers):
        from advisor.patch.float8 import float8_training

        return float8_training(ctx, fix, params, trainers)   # the LightningModule handed to fit

    def check(self, config, params, base):
        layers = value(config, "linears")
        if not layers:
            return None, "Float8Linear layers in the model", "the model's linear layers were not observed"
        got = int(layers.get("float8") or 0)
        return got > 0, "Float8Linear layers in the model", f"{got} of {layers.get('count')} linear layers in float8"
