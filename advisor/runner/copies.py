"""Host-to-device copies as part of the runner's Hooks (a mixin: it reads the hooks' controller,
observer and loop patcher): ``Tensor.to`` / ``Tensor.cuda`` from the host to an accelerator,
each observed once (pinned source? non_blocking?) and marked as an advisor::h2d range while
profiled. A loop hook: taken away when the measure stage starts."""

from __future__ import annotations

import functools
import sys

import torch

from advisor.runtime.capture import capturing as _is_compiling  # noqa: E402 - Dynamo or a jit trace

_NOT_ACCEL = frozenset(("cpu", "meta"))


def _target_type(args, kwargs):
    """Device type a ``Tensor.to(...)`` call moves to, or None when it does not move."""
    d = kwargs.get("device")
    if d is None and args:
        a = args[0]
        if isinstance(a, torch.Tensor):
            d = a.device
        elif isinstance(a, (str, torch.device)) or (isinstance(a, int) and not isinstance(a, bool)):
            d = a
    if d is None:
        return None
    if isinstance(d, torch.device):
        return d.type
    if isinstance(d, str):
        return d.split(":", 1)[0]
    if isinstance(d, int):
        return "cuda"
    return None


def _to_non_blocking(args, kwargs) -> bool:
    if "non_blocking" in kwargs:
        return bool(kwargs["non_blocking"])
    if args:
        if isinstance(args[0], torch.Tensor):
            return bool(args[1]) if len(args) > 1 and isinstance(args[1], bool) else False
        return bool(args[2]) if len(args) > 2 and isinstance(args[2], bool) else False
    return False


class CopyHooks:
    def _h2d(self, orig, tensor, args, kwargs, non_blocking):
        c = self.c
        if c.pending:
            c.commit()
        if not self.loop_active:
            return orig(tensor, *args, **kwargs)
        if not self._h2d_done:
            try:
                caller = sys._getframe(2)
                if not self.obs.sites._is_library(caller.f_code.co_filename):
                    in_loop = self._batch_seen or c.clock.steps_seen > 0 or self.depth > 0
                    self._h2d_done = self.obs.on_h2d(tensor, non_blocking, in_loop)
            except Exception as e:
                self._h2d_done = True
                c.internal_error("h2d observation", e)
        return self._ranged("advisor::h2d", orig, tensor, *args, **kwargs)

    def _patch_to(self) -> None:
        hooks = self
        orig_to = torch.Tensor.to
        orig_cuda = torch.Tensor.cuda

        @functools.wraps(orig_to)
        def to(self, *args, **kwargs):
            if not self.is_cpu or _is_compiling():
                return orig_to(self, *args, **kwargs)
            dt = _target_type(args, kwargs)
            if dt is None or dt in _NOT_ACCEL:
                return orig_to(self, *args, **kwargs)
            return hooks._h2d(orig_to, self, args, kwargs, _to_non_blocking(args, kwargs))

        @functools.wraps(orig_cuda)
        def cuda(self, *args, **kwargs):
            if not self.is_cpu or _is_compiling():
                return orig_cuda(self, *args, **kwargs)
            nb = kwargs.get("non_blocking", args[1] if len(args) > 1 else False)
            return hooks._h2d(orig_cuda, self, args, kwargs, bool(nb))

        self.loop.set(torch.Tensor, "to", to)
        self.loop.set(torch.Tensor, "cuda", cuda)
