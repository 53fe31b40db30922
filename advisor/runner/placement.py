"""Where the script puts its model, and what it trains: for the patch and its verification.

The patch (advisor.patch) converts or compiles the model right after the statement of the
script that moved it to its device (``model = Net().to(device)``, ``self.model.cuda()``): that
statement ran, whatever branches around it did not. The verification (advisor.verify) checks
the weights the optimizer trains and the graphs torch.compile made, which a model compiled
from its first call hides from the forward hooks.
"""

from __future__ import annotations

import functools
import sys
import weakref

import torch

from advisor.runtime.capture import capturing


def memory_format_of(t: torch.Tensor) -> str:
    try:
        if t.is_contiguous():
            return "contiguous"
        if t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last):
            return "channels_last"
        if t.dim() == 5 and t.is_contiguous(memory_format=torch.channels_last_3d):
            return "channels_last"
    except Exception:
        pass
    return "other"


class Placements:
    """module → the script's statements that moved it (``.to``/``.cuda``), each as the stack
    of the script's own frames, innermost first. Recorded until the first forward."""

    def __init__(self, sites, safe, active):
        self.sites, self._safe, self._active = sites, safe, active
        self._moves: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def install(self, patches) -> None:
        for name in ("to", "cuda"):
            orig = getattr(torch.nn.Module, name)

            def make(orig):
                @functools.wraps(orig)
                def placed(module, *a, **k):
                    if self._active() and not capturing():
                        self._safe("model placement observation", self._record, module)
                    return orig(module, *a, **k)
                return placed

            patches.set(torch.nn.Module, name, make(orig))

    def _record(self, module) -> None:
        caller = sys._getframe(3)   # _record ← _safe ← placed ← the caller
        while caller is not None and caller.f_code.co_name in ("to", "cuda") and \
                not self.sites.is_script_code(caller.f_code.co_filename):
            caller = caller.f_back  # a library's own override of .to (Lightning, transformers)
        if caller is None or not self.sites.is_script_code(caller.f_code.co_filename):
            return  # a library moving it (a trainer's strategy): not a statement of the script
        stack, f = [], caller
        while f is not None and len(stack) < 8:
            if self.sites.is_script_code(f.f_code.co_filename):
                stack.append(self.sites.where(f))
            f = f.f_back
        self._moves.setdefault(module, []).append(stack)

    def entry(self, module) -> dict:
        """The model's config entry: its class, and the script's last statement that moved it
        (the module's, or the one a DataParallel/DDP/compile wrapper holds)."""
        inner = getattr(module, "module", None) or getattr(module, "_orig_mod", None)
        events = self._moves.get(module) or (self._moves.get(inner) if inner is not None else None)
        value = {"class": type(inner if inner is not None else module).__name__,
                 "wrapper": type(module).__name__ if inner is not None else None}
        own = own_to(inner if inner is not None else module)
        if own is not None:   # a conversion written as model.to(...) would run it (patch.model_fixes)
            value["own_to"] = own
        if not events:
            return {"value": value, "where": None}
        return {"value": value, "where": events[-1][0], "stack": events[-1]}


def own_to(module) -> str | None:
    """The qualified name of the ``.to()`` the module's class defines instead of torch's
    (a task wrapper's, a LightningModule's), None where it is torch's own."""
    to = getattr(type(module), "to", None)
    if to is None or to is torch.nn.Module.to:
        return None
    return f"{getattr(to, '__module__', '?')}.{getattr(to, '__qualname__', 'to')}"


def trained_weights(optimizer) -> dict:
    """The memory format of the convolution weights ``optimizer`` trains (a weight both layouts
    describe, one input channel or 1x1 kernels, says nothing), and the graphs torch.compile
    made in this process."""
    fmt = None
    for group in (optimizer.param_groups if optimizer is not None else []):
        p = next((p for p in group["params"] if p.dim() == 4 and p.is_contiguous()
                  != p.is_contiguous(memory_format=torch.channels_last)), None)
        if p is not None:
            fmt = memory_format_of(p)
            break
    dynamo = sys.modules.get("torch._dynamo.utils")
    graphs = int(dynamo.counters["stats"]["unique_graphs"]) if dynamo is not None else 0
    return {"conv_memory_format": fmt, "compiled_graphs": graphs}
