"""Run a script as python would (``python HARNESS OUT.json script.py args...``), with each
DataLoader's arguments followed up the live stack by the runner's own pieces (the Observer's
_follow_call: advisor.runtime.provenance's Walker, cli_seen's argparse record), and write the
loaders' config entries ({"value", "where", "provenance"}), the options the run parsed, the
model's first call and the lines of the user's code that ran (runner.lines) to OUT.json, as
the child's record holds them. The layouts' tests (tests/test_provenance.py,
tests/test_switches.py) feed them to make_patch; a whole analyze runs the real runner (their
end-to-end tests)."""

import functools
import json
import os
import runpy
import sys

import torch
from torch.utils.data import DataLoader

from advisor.runner._util import Patcher
from advisor.runner.lines import LineRecorder
from advisor.runner.observe import _LOADER_ARGS
from advisor.runtime import provenance, source_ast
from advisor.runtime.cli_seen import CliSeen
from advisor.runtime.sites import ADVISOR_DIR, SiteFinder

HERE = os.path.dirname(os.path.abspath(__file__))
TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))


def main() -> None:
    out_path, script, *args = sys.argv[1:]
    sites = SiteFinder(os.getcwd(), extra_skip=(TORCH_DIR,))
    cli = CliSeen(sites)
    patches = Patcher()
    cli.install(patches)
    walker = provenance.Walker(sites, cli)
    loaders: list[dict] = []
    orig = DataLoader.__init__

    @functools.wraps(orig)
    def init(self, *a, **k):
        orig(self, *a, **k)
        frame = provenance.outside(sys._getframe(1), (ADVISOR_DIR, TORCH_DIR, HERE))
        call = source_ast.current_call(frame)
        loaders.append({"value": {"num_workers": self.num_workers, "batch_size": self.batch_size},
                        "where": sites.where(frame), "provenance": walker.at_call(frame, call, _LOADER_ARGS)})

    DataLoader.__init__ = init
    seen_input: dict = {}

    def first_forward(module, args):   # the model's call, where the runner's "input" site is
        if not seen_input and any(True for _ in module.parameters()):
            frame = provenance.outside(sys._getframe(1), (ADVISOR_DIR, TORCH_DIR, HERE))
            shape = list(args[0].shape) if args and isinstance(args[0], torch.Tensor) else None
            seen_input.update({"value": {"shape": shape}, "where": sites.where(frame)})

    torch.nn.modules.module.register_module_forward_pre_hook(first_forward)
    from torch.amp.autocast_mode import autocast

    seen_autocast: dict = {}
    enter = autocast.__enter__

    def autocast_enter(ac):    # as the Observer's _follow_autocast: the script's own with
        if not seen_autocast:
            frame = provenance.outside(sys._getframe(1), (ADVISOR_DIR, TORCH_DIR, HERE))
            call = provenance.context_call(frame, ("autocast",))
            if call is not None:
                where = provenance.positions(frame, call, ("enabled", "dtype")) or {"enabled": 2, "dtype": 1}
                seen_autocast.update({"value": {"enabled": bool(ac._enabled), "dtype": str(ac.fast_dtype)[6:]},
                                      "where": sites.where(frame), "provenance": walker.at_call(frame, call, where)})
        return enter(ac)

    autocast.__enter__ = autocast_enter
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    lines = LineRecorder(sites.is_script_code, sites.display)   # the lines that ran, as the baseline records them
    lines.start()
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        lines.stop()
        with open(out_path, "w") as fh:
            json.dump({"loaders": loaders, "cli_options": cli.all_options(), "executed_lines": lines.doc(),
                       "input": seen_input or None, "autocast": seen_autocast or None}, fh)


if __name__ == "__main__":
    main()
