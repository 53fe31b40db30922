"""A deliberately harmful intervention (tests only): poisons the loss with NaN.

It exists to prove that the numerics guard rejects a fast-but-broken trial. It is never
proposed by a rule and only runs when named with --fix.
"""

from __future__ import annotations

import torch

from advisor.runtime.patching import wrap

NAME = "nan-loss"


def describe(params) -> str:
    return "poison the loss with NaN (test only)"


def not_applicable(config, environment, params):
    return None


def apply(params) -> None:
    def make(orig):
        def backward(self, *a, **k):
            # Backward through a NaN-scaled loss: every gradient, then every weight, is NaN.
            return orig(self * float("nan"), *a, **k)
        return backward

    wrap(torch.Tensor, "backward", make)
