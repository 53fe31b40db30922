"""Which lines of the user's own code ran, from the script's start through its first steps.

The patch (advisor.patch) anchors its edits to statements that ran: a model built and then
wrapped in ``if dist.is_initialized():`` on one GPU must get its ``.compile()`` after the
statement that ran, not inside the branch that did not. Recorded only until the second
training step ends (the model, optimizer and loaders are built by then, and one whole step
ran), so the timed window pays nothing for it.

Python 3.12+ uses ``sys.monitoring``: each line reports once and is then disabled, so the
cost is a call per distinct line. Older Pythons use ``sys.settrace`` with a local tracer
only in the script's own frames (library frames get none); tracing is dropped frame by frame
once stopped. A forked process (a DataLoader worker) stops at once: it is not the run.
"""

from __future__ import annotations

import sys
import threading

STOP_AFTER_STEPS = 2


class LineRecorder:
    def __init__(self, is_script_code, display):
        self._is_script = is_script_code
        self._display = display
        self._files: dict[str, bool] = {}        # co_filename → the user's own code?
        self.lines: dict[str, set[int]] = {}     # co_filename → lines that ran
        self.active = False
        self._tool = None
        self._trace = None
        self._main = threading.main_thread()

    def _mine(self, filename: str) -> bool:
        hit = self._files.get(filename)
        if hit is None:
            try:
                hit = bool(self._is_script(filename))
            except Exception:
                hit = False
            self._files[filename] = hit
        return hit

    # ------------------------------------------------------------------ start / stop
    def start(self) -> None:
        if self.active or sys.gettrace() is not None:   # a debugger or coverage tool owns tracing
            return
        self.active = True
        mon = getattr(sys, "monitoring", None)
        if mon is not None:
            for tool in (mon.COVERAGE_ID, 4, 3):
                if mon.get_tool(tool) is None:
                    mon.use_tool_id(tool, "advisor")
                    self._tool = tool
                    break
            if self._tool is not None:
                mon.register_callback(self._tool, mon.events.LINE, self._on_line)
                mon.set_events(self._tool, mon.events.LINE)
                return
        sys.settrace(self._tracer())

    def stop(self) -> None:
        if not self.active:
            return
        self.active = False
        if self._tool is not None:
            mon = sys.monitoring
            try:
                mon.set_events(self._tool, 0)
                mon.register_callback(self._tool, mon.events.LINE, None)
                mon.free_tool_id(self._tool)
            except Exception:
                pass
            self._tool = None
        elif threading.current_thread() is self._main and sys.gettrace() is self._trace:
            sys.settrace(None)

    def after_fork(self) -> None:
        """In a forked child (a DataLoader worker): record nothing, trace nothing."""
        self.stop()
        self.lines = {}

    # ------------------------------------------------------------------ callbacks
    def _on_line(self, code, line):
        if self._mine(code.co_filename):
            self.lines.setdefault(code.co_filename, set()).add(line)
        return sys.monitoring.DISABLE

    def _tracer(self):
        """sys.settrace's function: called for every new frame while it is set, so the library's
        frames (nearly all of them) cost one dict look-up and no more."""
        files, mine, lines_of, rec = self._files, self._mine, self.lines, self

        def on_call(frame, event, arg):
            name = frame.f_code.co_filename
            hit = files.get(name)
            if hit is None:
                hit = mine(name)
            if not hit or not rec.active:
                return None
            lines = lines_of.get(name)
            if lines is None:
                lines = lines_of[name] = set()
            lines.add(frame.f_lineno)

            def local(frame, event, arg):
                if not rec.active:
                    return None
                if event == "line":
                    lines.add(frame.f_lineno)
                return local
            return local
        self._trace = on_call
        return on_call

    # ------------------------------------------------------------------ document
    def doc(self) -> dict:
        """{display path: sorted lines} for child.json."""
        out: dict[str, list[int]] = {}
        for filename, lines in list(self.lines.items()):
            try:
                key = self._display(filename)
            except Exception:
                key = filename
            out.setdefault(key, [])
            out[key] = sorted(set(out[key]) | lines)
        return out
