"""A child whose advisor is gone (killed with SIGKILL, by the OOM killer, with its terminal)
stops as advisor would have stopped it: SIGINT, so the script's KeyboardInterrupt and finally
blocks run and its open files are flushed; whatever was captured is saved, marked incomplete.

Without this watch, an orphaned process (the baseline, the repeat, a trial, the verification)
ran on to the end of its measured steps, or without end where it waited or hung: a GPU held,
and a sandbox written for a run nobody would read. A process waiting for advisor (started
ahead, held at its first CUDA use) leaves already: runner._util.wait_line."""

from __future__ import annotations

import os
import signal
import threading
import time

POLL_S = 0.5        # how often the parent is looked at: a thread that sleeps between looks
GRACE_S = 30.0      # after the SIGINT, the script's own Ctrl-C handling; then the process ends
NOTE = "advisor's process ended while the script ran: the script was stopped as advisor would have stopped it"


def watch(note=None) -> threading.Thread | None:
    """Watch this process's parent from now: when it changes (the parent died and the process
    was reparented), ``note`` (the run's note sink) is told, the script gets SIGINT, and the
    process ends GRACE_S later if the script has not. The parent is whatever started this
    process (advisor; torch.distributed.run under several ranks, itself advisor's child)."""
    parent = os.getppid()
    if parent <= 1:     # started by init or already orphaned: no parent to watch
        return None
    thread = threading.Thread(target=_watch, args=(parent, note), name="advisor-orphan-watch", daemon=True)
    thread.start()
    return thread


def _watch(parent: int, note) -> None:
    me = os.getpid()   # a forked copy (a DataLoader worker) has no copy of this thread
    while os.getppid() == parent:
        time.sleep(POLL_S)
    if note is not None:
        try:
            note(NOTE)
        except Exception:   # noqa: BLE001 - the stop matters more than the note
            pass
    try:
        os.kill(me, signal.SIGINT)
    except OSError:
        return
    time.sleep(GRACE_S)
    from advisor.runner._util import flush_open_files, flush_std

    flush_open_files()
    flush_std()
    os._exit(130)
