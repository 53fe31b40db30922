"""Defer the host syncs of ``.item()`` calls made by the script itself.

``running_loss += loss.item()`` every step makes the CPU wait until the GPU has finished
the step; the GPU then idles while the CPU prepares and launches the next one. Here a
CUDA ``.item()`` called from the user's own code returns a ``Deferred`` number
(advisor.interventions.deferred): the value is copied to pinned host memory on the stream
and read when it is first needed (a printed loss line, a comparison), so the CPU runs
ahead as it would with ``running_loss += loss.detach()``. Values are bit-identical; what a
``Deferred`` cannot stand in for (``json.dumps``, ``torch.tensor(x)``) raises, and the
trial is rejected with that error.

Only calls whose caller is the script's code are deferred: torch, installed packages
(site-packages) and advisor get the plain number, as they expect. Bool, complex and non-scalar tensors, CPU
tensors, and calls while a CUDA graph is captured or under torch.compile are untouched.
"""

from __future__ import annotations

import itertools
import os
import sys

import torch

from advisor.interventions import deferred
from advisor.runtime.patching import wrap
from advisor.runtime.sites import ADVISOR_DIR, SiteFinder

NAME = "defer-syncs"
_ADVISOR = ADVISOR_DIR + os.sep
_KINDS = {torch.float16, torch.bfloat16, torch.float32, torch.float64,
          torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64}


def describe(params) -> str:
    return ".item() in the script reads its value when first used (no host sync per call)"


def not_applicable(config, environment, params):
    if not environment.get("gpu_count"):
        return "no GPU: a CPU .item() does not wait for a device"
    sites = ((config.get("item_calls") or {}).get("value") or {}).get("sites") or {}
    if not any(s.get("device") for s in sites.values()):
        return "the script's steps made no .item() call on a GPU tensor"
    return None


def _user_caller(is_script_code) -> bool:
    """Was .item() called by the script's own code (not torch, not an installed package such
    as a trainer or metrics library, not advisor)? The runner may wrap .item() too: its
    wrapper's frame is skipped, no other advisor frame (advisor's own calls get numbers)."""
    f = sys._getframe(2)
    while f is not None and f.f_code.co_name == "item" and f.f_code.co_filename.startswith(_ADVISOR):
        f = f.f_back
    return f is not None and is_script_code(f.f_code.co_filename)


def apply(params) -> None:
    is_script_code = SiteFinder(os.getcwd(), extra_skip=(os.path.dirname(torch.__file__),)).is_script_code
    seq = itertools.count()

    def make(orig):
        def item(self):
            if (not self.is_cuda or self.dtype not in _KINDS or self.numel() != 1
                    or type(self) not in (torch.Tensor, torch.nn.Parameter)
                    or torch.compiler.is_compiling() or torch.cuda.is_current_stream_capturing()
                    or not _user_caller(is_script_code)):
                return orig(self)
            host = torch.empty(self.shape, dtype=self.dtype, pin_memory=True)
            host.copy_(self.detach(), non_blocking=True)
            stream = torch.cuda.current_stream(self.device)
            event = torch.cuda.Event()
            event.record(stream)
            return deferred.leaf(lambda: orig(host), event, (stream.device_index, stream.stream_id), next(seq))
        return item

    wrap(torch.Tensor, "item", make)
