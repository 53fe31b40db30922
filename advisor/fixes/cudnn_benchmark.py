"""``cudnn-benchmark``: cuDNN times its convolution algorithms once and keeps the fastest."""

from __future__ import annotations

from advisor.fixes.base import Fix


class CudnnBenchmark(Fix):
    name = "cudnn-benchmark"
    runtime = "cudnn_benchmark"
    editor = "advisor.patch.flag_fixes:cudnn_benchmark"
    bundled = True
    slow_start = True   # its first step searches every convolution's algorithms
    where_key = "cudnn.benchmark"

    def lightning_edit(self, ctx, fix, params, trainers):
        from advisor.patch.frameworks import _on_calls

        return _on_calls(trainers, ctx, [("benchmark", "True")], "Trainer")

    def check(self, config, params, base):
        got = (config.get("cudnn.benchmark") or {}).get("value")
        return (None if got is None else bool(got)), "cudnn.benchmark = True", f"cudnn.benchmark = {got}"
