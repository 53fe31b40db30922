"""``ddp``: one process per GPU under torchrun, the model in DistributedDataParallel."""

from __future__ import annotations

from advisor.fixes.base import Fix, value


class Ddp(Fix):
    name = "ddp"
    runtime = "ddp"
    editor = "advisor.patch.ddp_fix:ddp"
    changes_numerics = True
    changes_batch = True   # each process sees its shard of the batch
    fresh = True           # its ranks start under torch.distributed.run
    # Tune one GPU, then scale out: every trial after a kept ddp is a run over every GPU, one
    # at a time, where the single-GPU trials before it run side by side, one GPU each. Among
    # the fixes that go last it comes in gain order, so mostly before torch.compile: under a
    # short budget the largest gain is not the one left out.
    last = True
    scales_out = True

    def candidates(self, params, environment):   # one process per GPU: every GPU the machine has (2 at least)
        return [{"params": {"nproc": int(params.get("nproc") or max(2, int(environment.get("gpu_count") or 0)))}}]

    def processes(self, params):
        return int(params.get("nproc") or 2)

    def check(self, config, params, base):
        got = value(config, "data_parallel").get("class")
        return got == "DistributedDataParallel", "the model in DistributedDataParallel", f"model wrapper {got}"
