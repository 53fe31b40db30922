"""``no-cudnn-benchmark``: cuDNN picks convolution algorithms by its heuristics, without timing
them: where its timing repeats every step (nn.DataParallel's replica threads), that is faster."""

from __future__ import annotations

from advisor.fixes.base import Fix
from advisor.fixes.cudnn_benchmark import benchmark_check


class NoCudnnBenchmark(Fix):
    name = "no-cudnn-benchmark"
    runtime = "no_cudnn_benchmark"
    editor = "advisor.patch.flag_fixes:no_cudnn_benchmark"
    bundled = True
    same_graphs = True   # cuDNN's convolutions, not Inductor's graphs
    where_key = "cudnn.benchmark"

    def check(self, config, params, base):
        return benchmark_check(config, False)
