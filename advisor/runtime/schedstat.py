"""The main thread's wait for a core, from the kernel's /proc/self/schedstat: read by the runner's
start-up timeline and by the fixes that time their own work (the samples cache), so it lives
below both."""

from __future__ import annotations

_SCHEDSTAT = "/proc/self/schedstat"


def cpu_wait_s() -> float | None:
    """Seconds the main thread has waited, runnable, for a CPU since it started; None where the
    kernel does not say (no schedstat: gVisor, other systems)."""
    try:
        with open(_SCHEDSTAT, encoding="ascii") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None
