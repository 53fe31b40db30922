"""advisor: a profiling-driven performance advisor for PyTorch training.

The one call a training script may make is :func:`step`, for loops that have no
torch optimizer to hook. Outside ``advisor analyze`` it does nothing.
"""

__version__ = "0.1.0"


def step() -> None:
    """Mark the end of one training step (only needed when no torch optimizer steps)."""
    from advisor.runner import session

    session.explicit_step()
