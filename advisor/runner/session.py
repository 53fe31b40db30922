"""The advisor session inside the child process.

This module stays light (no torch import at module level) so that ``advisor.step()`` costs
nothing outside ``advisor analyze``; ``install()`` builds the real machinery."""

from __future__ import annotations

import os

_SESSION = None  # the Controller while a script runs under advisor
_stacks_file = None  # where faulthandler writes the stacks on SIGUSR2: open for the whole run


def explicit_step() -> None:
    """``advisor.step()``: mark the end of a training step. A no-op outside advisor."""
    ctl = _SESSION
    if ctl is not None:
        ctl.explicit_step()


def active() -> bool:
    return _SESSION is not None


def source_of(path: str) -> str:
    """Where the text of the user's file `path` is read in this process: the patched copy the
    verification reads in its place (spec ``sources``, runner/sandbox.py), else the file."""
    sb = getattr(_SESSION, "sandbox", None)
    return (sb.sources.get(os.path.realpath(path)) or path) if sb is not None else path


def install(spec: dict):
    """Install hooks and observers for `spec` (see docs/internals.md §1) and return the Controller.
    The caller runs the script, then calls ``controller.finish(exc)``."""
    global _SESSION
    from advisor.runner import disarm, hooks, observe
    from advisor.runner.controller import Controller

    ctl = Controller(spec)
    from advisor.runtime import patching as _patch

    _patch.set_note_sink(ctl.note)   # what a fix finds at run time that it cannot apply
    from advisor.runner import orphan

    orphan.watch(ctl.note)           # advisor gone: the script stopped as advisor would stop it
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_forget)   # a forked worker is not the run
    if spec.get("hold") and spec.get("hold_at", "cuda") == "cuda":
        from advisor.runner import held

        _time_cuda_init(ctl.startup.milestones, lambda: held.hold(ctl))
    else:
        _time_cuda_init(ctl.startup.milestones)
    _seed(spec.get("seed"))
    # Interventions (trials) patch torch first, so that advisor's wrappers sit on top of
    # theirs and taking advisor's loop hooks off at the measure stage leaves theirs in place.
    _apply_interventions(ctl, spec.get("interventions") or [])
    obs = observe.Observer(ctl)
    ctl.observer = obs
    obs.install()
    if spec.get("record_lines"):
        from advisor.runner.lines import LineRecorder

        ctl.lines = LineRecorder(obs.sites.is_script_code, obs.sites.display)
    hk = hooks.Hooks(ctl, obs)
    ctl.hooks = hk
    hk.install()
    disarm.install(ctl, obs, hk.permanent, pass_through=bool(spec.get("own_profiler")))
    try:
        import torch

        if torch.cuda.is_available():
            ctl.ranges.enable_nvtx()
    except Exception as e:
        ctl.internal_error("NVTX setup", e)
    if spec.get("sandbox_writes"):
        from advisor.runner.sandbox import Sandbox

        # the whole run directory is advisor's: the trace's tb/, the patched copies
        own = (os.path.dirname(ctl.run.tb_dir), *([spec["sandbox_root"]] if spec.get("sandbox_root") else []))
        ctl.sandbox = Sandbox(ctl.run.dir, ctl.note, also_allowed=own, sources=spec.get("sources"))
        ctl.sandbox.hide_from(spec.get("hidden_file"))   # the tree as the baseline found it
        ctl.sandbox.install()
    elif spec.get("record_created") and ctl.run.world_size == 1:
        from advisor.runner.created import Created

        ctl.created = Created(ctl.run.dir, also_left_out=(os.path.dirname(ctl.run.tb_dir),))
        ctl.created.install()
    _dump_stacks_on_request(ctl)
    _SESSION = ctl
    ctl.start()
    return ctl


def _forget() -> None:
    global _SESSION
    _SESSION = None
    try:
        from advisor.runtime import patching as _patch

        _patch.set_note_sink(None)
    except Exception:
        pass


def _dump_stacks_on_request(ctl) -> None:
    """SIGUSR2 (advisor, when the script stalls) writes every thread's Python stack into the
    run directory: where a deadlocked loader or a hung collective waits."""
    global _stacks_file
    import faulthandler
    import signal

    if not hasattr(signal, "SIGUSR2"):
        return
    try:
        from advisor.runner.parent import STACKS

        _stacks_file = open(os.path.join(ctl.run.dir, STACKS), "w", encoding="utf-8")
        faulthandler.register(signal.SIGUSR2, file=_stacks_file, all_threads=True)
    except Exception as e:  # a script's own use of the signal, say: no stacks then
        ctl.internal_error("stack dump on SIGUSR2", e)


def _time_cuda_init(startup: dict, hold=None) -> None:
    """Note when the script first initializes CUDA and when that is done (startup
    "cuda_init", "cuda_ready"). torch calls torch.cuda._lazy_init by name, from Python and
    from C++, on first use; the wrapper puts the original back once it has run. hold: called
    once, first, in a process started ahead of its trial (held.hold): it waits there."""
    import threading
    import time

    import torch.cuda as tc

    if tc.is_initialized():
        return
    real = tc._lazy_init
    held = threading.Lock()  # a pin-memory thread and the main thread may both get here

    def timed_lazy_init():
        if tc.is_initialized():
            return real()
        if hold is not None and held.acquire(blocking=False):
            hold()  # never released: later callers (and a failed init's retry) go straight on
        startup.setdefault("cuda_init", time.time())
        try:
            return real()
        finally:
            if tc.is_initialized():
                startup["cuda_ready"] = time.time()
                tc._lazy_init = real

    tc._lazy_init = timed_lazy_init


def _seed(seed) -> None:
    """spec["seed"]: seed python's, torch's (and numpy's, when loaded) RNGs before the script."""
    if seed is None:
        return
    import random
    import sys

    import torch

    random.seed(seed)
    torch.manual_seed(seed)
    np = sys.modules.get("numpy")
    if np is not None:
        try:
            np.random.seed(seed)
        except Exception:
            pass


def _apply_interventions(ctl, items: list) -> None:
    """spec["interventions"]: [{"name", "params"}] applied in order (advisor.interventions);
    a failure is a note (the trial then shows it did not apply) and the run goes on."""
    if not items:
        return
    from advisor import fixes

    for item in items:
        name = item.get("name") if isinstance(item, dict) else str(item)
        try:
            ctl.interventions_applied.extend(fixes.apply_all([item]))
        except Exception as e:
            from advisor.runner._util import one_line_exception

            ctl.note(f"intervention {name!r} failed to apply: {one_line_exception(e)}")
