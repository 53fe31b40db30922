"""One process of trials side by side (advisor.trials.gpus): where it runs, what stops it, its
result, and its directory, kept under an alias while another process of its name runs."""

from __future__ import annotations

import dataclasses
import os
import shutil
import threading
from pathlib import Path

from advisor.runner.follow import Signals


@dataclasses.dataclass
class Job:
    key: tuple                  # (name, stack keys, profiled)
    gpu: str | None
    guess: bool                 # started on a guess: stopped when no longer expected
    cancel: Signals = dataclasses.field(default_factory=Signals)   # counted from the ladder's thread
    thread: threading.Thread | None = None
    result: tuple | None = None
    run_dir: Path | None = None  # the analyze's: its process's directory is trials/<name>
    began: float = 0.0          # monotonic, when its process started and ended
    ended: float = 0.0
    alias: str | None = None    # the name its process runs under while another of its name runs
    logged: dict | None = None  # a guess's entry in the runner's guess log (when it was given up)

    @property
    def name(self) -> str:
        return self.key[0]

    @property
    def where(self) -> str:
        """The name its process writes under: trials/<where>, tb/<where>."""
        return self.alias or self.name

    def discard(self) -> None:
        """A run the ladder will not take: its directory and traces go (the next process of its
        name writes there)."""
        if self.run_dir is None:
            return
        shutil.rmtree(self.run_dir / "trials" / self.where, ignore_errors=True)
        shutil.rmtree(self.run_dir / "tb" / self.where, ignore_errors=True)   # its traces, whole or cut short

    def take_name(self) -> None:
        """A guess run under an alias, taken: its directory and traces move to its own name
        (the other process of that name was stopped first), and what its run says of them."""
        if not self.alias or self.run_dir is None or self.result is None:
            return
        for sub in ("trials", "tb"):
            src, dst = self.run_dir / sub / self.alias, self.run_dir / sub / self.name
            if src.exists():
                shutil.rmtree(dst, ignore_errors=True)
                os.rename(src, dst)
        child, analysis, model = self.result
        self.result = (renamed(child, self.alias, self.name), renamed(analysis, self.alias, self.name), model)
        self.alias = None


def renamed(value, alias: str, name: str):
    """``value`` with the alias's directories (trials/<alias>, tb/<alias>) and the alias itself
    read as the name's, in every string it holds."""
    if isinstance(value, str):
        if value == alias:
            return name
        return value.replace(f"trials/{alias}", f"trials/{name}").replace(f"tb/{alias}", f"tb/{name}")
    if isinstance(value, dict):
        return {k: renamed(v, alias, name) for k, v in value.items()}
    if isinstance(value, list):
        return [renamed(v, alias, name) for v in value]
    return value
