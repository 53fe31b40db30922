"""Patching helpers shared by the interventions and the runner (child process only)."""

from __future__ import annotations

import functools
import hashlib
import random
import sys
import threading
import types

import torch

from advisor.runtime import NOT_APPLIED  # torch-free, for the ladder in the parent

_state = threading.local()


@functools.cache
def source_functions(text: str, label: str) -> dict:
    """The functions a fix's patch writes into the script (its source text), executed once in
    this process: the trial runs the same text the patch ships. They live in a module of their
    own, registered by name, as the patched script's live in its module: pickle, and a process
    forked to run one of them (precompute's chunks), find them by name."""
    module = types.ModuleType(f"_advisor_source_{hashlib.sha1(text.encode()).hexdigest()[:12]}")
    exec(compile(text, f"<advisor {label}>", "exec"), module.__dict__)  # noqa: S102 - advisor's own text
    sys.modules[module.__name__] = module
    return module.__dict__


def wrap(owner, attr: str, make_wrapper) -> None:
    """Replace owner.attr with make_wrapper(original); the original stays reachable."""
    original = getattr(owner, attr)
    wrapped = make_wrapper(original)
    functools.update_wrapper(wrapped, original)
    wrapped.__advisor_original__ = original
    setattr(owner, attr, wrapped)


_pre: list = []    # every fix's callbacks, in the order the fixes were applied
_post: list = []


def outermost_forward(pre=None, post=None) -> None:
    """Call pre(module, args) / post(module) around outermost module calls only.

    Nested submodule calls are not outermost; a loss module called after the model is its
    own outermost call. ``pre`` may return replacement args. One pair of global hooks serves
    every fix (each fix registering its own pair, the second saw the first's depth count
    and never ran: stacked fixes were silently dropped).
    """
    if not _pre and not _post:
        torch.nn.modules.module.register_module_forward_pre_hook(_pre_hook)
        torch.nn.modules.module.register_module_forward_hook(_post_hook, always_call=True)
    if pre is not None:
        _pre.append(pre)
    if post is not None:
        _post.append(post)


def at_first_training_call(convert, wants=None) -> None:
    """convert(model) once per model, at its first outermost call in training, before it runs:
    inside torch.compile's wrapper the model itself, before Dynamo traces it. ``wants(model)``
    says which calls count (default: a model with trainable parameters; a loss module or a
    frozen one called first is not the model trained)."""
    done: set[int] = set()
    wants = wants or (lambda model: any(p.requires_grad for p in model.parameters()))

    def pre(module, args):
        model = getattr(module, "_orig_mod", module)
        if id(model) not in done and module.training and wants(model):
            done.add(id(model))
            convert(model)
        return None

    outermost_forward(pre=pre)


def loading(delta: int) -> None:
    """The runner marks DataLoader.__next__ (+1 in, -1 out): module calls made while a batch
    is produced in this process (a Dataset's torchvision transforms are nn.Modules) are the
    data pipeline's, not the model's; no fix and no observation applies to them."""
    _state.loading = getattr(_state, "loading", 0) + delta


class making_batches:
    """``with making_batches():`` around a fix's own reads of the Dataset (precomputing or
    preloading it in the main process): its transforms' module calls are not the model's.
    Counted as one, they set the batch size to 1 from a transform's input (a faster preload
    trial would read a tiny samples/s and be rejected)."""

    def __enter__(self):
        loading(+1)
        return self

    def __exit__(self, *exc):
        loading(-1)
        return False


def in_loading() -> bool:
    """A batch is being made: in this process (loading), or anywhere in a DataLoader worker
    process, where the Dataset's transforms run and CUDA cannot be used (a forked worker that
    enters autocast for a torchvision transform dies re-initializing CUDA: an ImageFolder
    trial of channels_last + AMP fails so before its first step). Never asked while
    torch.compile traces the model's forward: get_worker_info is one of the functions Dynamo
    will not trace, and asked there, it breaks the graph at each module call (a compiled stack
    then runs slower than eager, host-bound: docs/trials.md)."""
    if getattr(_state, "loading", 0) > 0:
        return True
    return not _is_compiling() and _worker_info() is not None


_worker_info = torch.utils.data.get_worker_info
from advisor.runtime.capture import capturing as _is_compiling  # noqa: E402 - Dynamo or a jit trace


def _pre_hook(module, args):
    if in_loading():
        return None
    depth = getattr(_state, "depth", 0)
    _state.depth = depth + 1
    if depth:
        return None
    replaced = False
    for fn in _pre:
        out = fn(module, args)
        if out is not None:
            args, replaced = out, True
    return args if replaced else None


def _post_hook(module, args, output):
    if in_loading():
        return None
    _state.depth = max(0, getattr(_state, "depth", 1) - 1)
    if _state.depth == 0:
        for fn in _post:
            fn(module)
    return None


def before_backward(fn) -> None:
    """Call fn() just before every Tensor.backward / torch.autograd.backward."""
    def make(orig):
        def wrapper(*a, **k):
            fn()
            return orig(*a, **k)
        return wrapper
    wrap(torch.Tensor, "backward", make)
    wrap(torch.autograd, "backward", make)


def served_in_process(loader) -> None:
    """A DataLoader whose batches this process makes from now on (a cached batch, DALI's): no
    workers to start, nothing to pin, no worker timeout. Set in its ``__dict__``: DataLoader
    refuses to change these attributes once it has been iterated."""
    loader.__dict__.update(num_workers=0, pin_memory=False, timeout=0)


def accelerator() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


_note_sink = None  # the run's note(text), set by the runner's session (runner/session.py)


def set_note_sink(fn) -> None:
    global _note_sink
    _note_sink = fn


def not_applied(name: str, reason: str) -> None:
    """Record in the run's notes that an intervention found, at run time, that it cannot
    apply here; trials report such a trial as skipped with this reason."""
    try:
        if _note_sink is not None:
            _note_sink(f"{NOT_APPLIED} {name}: {reason}")
    except Exception:
        pass


def rng_states() -> tuple:
    """The random states a probe of the user's dataset may draw from (torch, random, numpy)."""
    try:
        import numpy as np

        np_state = np.random.get_state()
    except ImportError:
        np_state = None
    return torch.get_rng_state(), random.getstate(), np_state


def restore_rng(states: tuple) -> None:
    """Put back what rng_states() saved: the script's own random stream is what it would have been."""
    torch.set_rng_state(states[0])
    random.setstate(states[1])
    if states[2] is not None:
        import numpy as np

        np.random.set_state(states[2])
