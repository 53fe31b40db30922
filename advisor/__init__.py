"""advisor: a profiling-driven performance advisor for PyTorch training.

The one call a training script may make is :func:`step`, for loops that have no
torch optimizer to hook. Outside ``advisor analyze`` it does nothing.
"""

__version__ = "0.1.0"


def step() -> None:
    """Mark the end of one training step (only needed when no torch optimizer steps)."""
    from advisor.runner import session

    session.explicit_step()


# The notebook API (advisor/api/), loaded on first use: `import advisor` stays cheap for the
# training scripts that only call step(), and reading a saved run never loads the trace stack.
_API = ("load_run", "inspect", "Run", "Inspection", "Finding", "Findings", "Trial", "Trials", "Roofline", "Patch")


def __getattr__(name: str):
    if name in _API:
        from advisor import api

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})
