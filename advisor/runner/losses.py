"""The per-step losses a child records, read back from the device when its document is saved."""

from __future__ import annotations

import torch


def read_losses(refs: list) -> None:
    """Replace the loss tensors in ``refs`` by their values, in place: one host copy a device,
    not one ``.item()`` each. At the end of a timed window hundreds of tensors may wait to be
    read, and their ``.item()`` calls would be counted as the script's host waits
    (Hooks._time_item; docs/measurement.md)."""
    by_device: dict = {}
    for i, v in enumerate(refs):
        if isinstance(v, torch.Tensor):
            by_device.setdefault(v.device, []).append(i)
    for idx in by_device.values():
        try:
            values = torch.stack([refs[i].detach().reshape(()).float() for i in idx]).cpu().tolist()
        except Exception:  # a tensor of another shape, a device that cannot stack: one by one
            values = [_one_loss(refs[i]) for i in idx]
        for i, v in zip(idx, values):
            refs[i] = v


def _one_loss(t) -> float:
    try:
        return float(t.detach().float().reshape(()).cpu()) if t.numel() == 1 else float("nan")
    except Exception:
        return float("nan")


class LossLog:
    """Each step's loss: the detached tensor its first backward ran on (read back only when
    child.json is written: no sync in the step), a stand-in float, or None."""

    def __init__(self):
        self.current = None       # this step's
        self.refs: list = []      # per step: tensor | float | None

    def saw(self, loss) -> None:
        if self.current is None:
            self.current = loss

    def step_ended(self) -> None:
        self.refs.append(self.current)
        self.current = None

    def values(self) -> list:
        read_losses(self.refs)
        return [float("nan") if v is None else v for v in self.refs]
