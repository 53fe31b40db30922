"""Patching helpers shared by the interventions (child process only)."""

from __future__ import annotations

import functools
import threading

import torch

_state = threading.local()


def wrap(owner, attr: str, make_wrapper) -> None:
    """Replace owner.attr with make_wrapper(original); the original stays reachable."""
    original = getattr(owner, attr)
    wrapped = make_wrapper(original)
    functools.update_wrapper(wrapped, original)
    wrapped.__advisor_original__ = original
    setattr(owner, attr, wrapped)


def outermost_forward(pre=None, post=None) -> None:
    """Call pre(module, args) / post(module) around outermost module calls only.

    Nested submodule calls are not outermost; a loss module called after the model is its
    own outermost call. ``pre`` may return replacement args.
    """
    def pre_hook(module, args):
        depth = getattr(_state, "depth", 0)
        _state.depth = depth + 1
        if depth == 0 and pre is not None:
            return pre(module, args)
        return None

    def post_hook(module, args, output):
        _state.depth = max(0, getattr(_state, "depth", 1) - 1)
        if _state.depth == 0 and post is not None:
            post(module)
        return None

    torch.nn.modules.module.register_module_forward_pre_hook(pre_hook)
    torch.nn.modules.module.register_module_forward_hook(post_hook, always_call=True)


def before_backward(fn) -> None:
    """Call fn() just before every Tensor.backward / torch.autograd.backward."""
    def make(orig):
        def wrapper(*a, **k):
            fn()
            return orig(*a, **k)
        return wrapper
    wrap(torch.Tensor, "backward", make)
    wrap(torch.autograd, "backward", make)


def accelerator() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


NOT_APPLIED = "intervention not applied:"


def not_applied(name: str, reason: str) -> None:
    """Record in the run's notes that an intervention found, at run time, that it cannot
    apply here; trials report such a trial as skipped with this reason."""
    try:
        from advisor.runner import session

        ctl = session._SESSION
        if ctl is not None:
            ctl.note(f"{NOT_APPLIED} {name}: {reason}")
    except Exception:
        pass
