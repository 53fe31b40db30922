"""The advisor session inside the child process.

This module stays light (no torch import at module level) so that ``advisor.step()`` costs
nothing outside ``advisor analyze``; ``install()`` builds the real machinery."""

from __future__ import annotations

_SESSION = None  # the Controller while a script runs under advisor


def explicit_step() -> None:
    """``advisor.step()``: mark the end of a training step. A no-op outside advisor."""
    ctl = _SESSION
    if ctl is not None:
        ctl.explicit_step()


def active() -> bool:
    return _SESSION is not None


def install(spec: dict):
    """Install hooks and observers for `spec` (see internals.md §1) and return the Controller.
    The caller runs the script, then calls ``controller.finish(exc)``."""
    global _SESSION
    from advisor.runner import disarm, hooks, observe
    from advisor.runner.controller import Controller

    ctl = Controller(spec)
    obs = observe.Observer(ctl)
    ctl.observer = obs
    obs.install()
    hk = hooks.Hooks(ctl, obs)
    ctl.hooks = hk
    hk.install()
    disarm.install(ctl, obs, hk.permanent)
    try:
        import torch

        if torch.cuda.is_available():
            ctl.ranges.enable_nvtx()
    except Exception as e:
        ctl.internal_error("NVTX setup", e)
    if spec.get("interventions"):
        ctl.note("interventions are not applied by this runner version: "
                 + ", ".join(str(i) for i in spec["interventions"]))
    _SESSION = ctl
    ctl.start()
    return ctl
