"""``cudnn-benchmark``: cuDNN times its convolution algorithms once and keeps the fastest."""

from __future__ import annotations

from advisor.fixes.base import Fix


class CudnnBenchmark(Fix):
    name = "cudnn-benchmark"
    runtime = "cudnn_benchmark"
    editor = "advisor.patch.flag_fixes:cudnn_benchmark"
    bundled = True
    same_graphs = True   # cuDNN's convolutions, not Inductor's graphs
    slow_start = True   # its first step searches every convolution's algorithms
    where_key = "cudnn.benchmark"
    allowed_by = "nondeterministic"   # the algorithm cuDNN picks may differ from run to run

    def overrides(self, config):
        """A script that asks for reproducible convolutions (cudnn.deterministic, deterministic
        algorithms, or benchmark switched off in its own code) keeps them."""
        for key, text in (("cudnn.deterministic", "torch.backends.cudnn.deterministic = True"),
                          ("deterministic_algorithms", "torch.use_deterministic_algorithms(True)")):
            entry = config.get(key) or {}
            if entry.get("value") is True:
                return text + (f" at {entry['where']}" if entry.get("where") else "")
        entry = config.get("cudnn.benchmark") or {}
        if entry.get("value") is False and entry.get("where"):
            return f"torch.backends.cudnn.benchmark = False at {entry['where']}"
        return None

    def lightning_edit(self, ctx, fix, params, trainers):
        from advisor.patch.frameworks import _on_calls

        return _on_calls(trainers, ctx, [("benchmark", "True")], "Trainer")

    def check(self, config, params, base):
        return benchmark_check(config, True)


def benchmark_check(config: dict, on: bool) -> tuple[bool | None, str, str]:
    """Whether the patched run ran with cudnn.benchmark ``on`` (None: not observed)."""
    got = (config.get("cudnn.benchmark") or {}).get("value")
    return (None if got is None else bool(got) == on), f"cudnn.benchmark = {on}", f"cudnn.benchmark = {got}"
