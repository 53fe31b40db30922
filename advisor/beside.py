"""Work of advisor's own run on a GPU of its own while the trials' last processes run on the
others: with GPUs side by side, the patch's verification starts once the ladder's stack is final,
beside the batch sizes and the data-free ceiling measured on top of it (advisor.pipeline).

The work runs in a thread; its child process is stopped through ``signals`` (a ``count`` that
grows, as run_child reads it), which ``join`` raises when Ctrl-C is pressed. An exception in the
work is raised again in the joining thread, as if the work had run there."""

from __future__ import annotations

import threading
from collections.abc import Callable

from advisor.runner.follow import Signals


class Beside:
    def __init__(self):
        self.signals = Signals()   # entered off the main thread: it only counts
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None

    @property
    def started(self) -> bool:
        return self.thread is not None

    def start(self, work: Callable[[], None], release: Callable[[], None]) -> None:
        """Run ``work`` in a thread; ``release`` (its GPU back to the trials) once it is done."""
        def run() -> None:
            try:
                work()
            except BaseException as e:  # noqa: BLE001 - raised again by join
                self.error = e
            finally:
                release()

        self.thread = threading.Thread(target=run, daemon=True, name="beside the trials")
        self.thread.start()

    def join(self, pressed: Callable[[], bool]) -> None:
        """Wait for the work, passing Ctrl-C on to its process (``pressed``: whether it came)."""
        if self.thread is None:
            return
        while self.thread.is_alive():
            self.thread.join(0.2)
            if pressed() and not self.signals.count:
                self.signals.count += 1
        if self.error is not None:
            raise self.error
