""".item() on tensors as part of the runner's Hooks (a mixin: it reads the hooks' controller,
observer and patchers): the host time the timed window waits in it (permanent), and where the
script reads device scalars back (a loop hook)."""

from __future__ import annotations

import functools
import sys
from time import perf_counter

import torch

from advisor.runtime.capture import capturing as _is_compiling  # noqa: E402 - Dynamo or a jit trace


class ItemHooks:
    def _time_item(self) -> None:
        """The host time the timed window spends in .item() on device tensors: whether the
        host waits for the GPU there, measured without the profiler (which slows the host and
        hides these waits in a profiled trace: docs/measurement.md). One perf_counter pair per
        call; ADV110 reads it."""
        clock, seen = self.c.clock, self.c.seen
        orig = torch.Tensor.item

        @functools.wraps(orig)
        def item(t):
            # is_compiling first: traced by torch.compile, the wrapper then reads no controller
            # state, so no guard on it recompiles the model when the window opens
            if _is_compiling() or t.is_cpu or clock.phase != "measure" or clock.settle:
                return orig(t)
            t0 = perf_counter()
            try:
                return orig(t)
            finally:
                seen.waited_in_item(perf_counter() - t0)

        self.permanent.set(torch.Tensor, "item", item)

    def _patch_item(self) -> None:
        """Where the script reads device scalars back (ADV110's evidence, defer-syncs' edit)."""
        hooks, c = self, self.c
        orig = torch.Tensor.item

        @functools.wraps(orig)
        def item(t):
            if not _is_compiling() and hooks.loop_active:  # compile first: no guard on the flag
                try:
                    hooks.obs.on_item(sys._getframe(1), c.clock.steps_seen, not t.is_cpu)
                except Exception as e:
                    c.internal_error(".item() observation", e)
            return orig(t)

        self.loop.set(torch.Tensor, "item", item)
