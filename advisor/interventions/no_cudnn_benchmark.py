"""cudnn.benchmark = False, kept off even if the script switches it on: under nn.DataParallel the
replicas' forward runs in threads made anew at every call, and cuDNN keeps its benchmarked plans
per thread, so each forward times its convolutions' algorithms again (rules ADV124)."""

from __future__ import annotations

from advisor.interventions.cudnn_benchmark import already, hold

NAME = "no-cudnn-benchmark"


def describe(params) -> str:
    return "torch.backends.cudnn.benchmark = False"


def not_applicable(config, environment, params):
    return already(config, False)


def apply(params) -> None:
    hold(False)
