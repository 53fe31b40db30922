"""The host as a process of advisor's sees it."""

from __future__ import annotations

import os


def usable_cpus() -> int:
    """The CPU cores this process may run on: its affinity (taskset, a Slurm or container CPU
    binding), not the machine's count, which os.cpu_count() gives. A loader sized for 64 cores on
    a job bound to 8 runs its workers eight to a core."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):   # no affinity on this platform (macOS)
        return os.cpu_count() or 1
