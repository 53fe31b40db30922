"""Write a finished run's fixes.patch again with this checkout's advisor.patch: the run's kept
stack (and --apply fixes) and its observed config, as analyze wrote it at the end of the trials.
For checking a change of the source edits against a GPU run recorded before it.

    python benchmarks/repatch.py RUN_DIR SCRIPT OUT.patch   # e.g. reports/examples/cifar_resnet-h100 examples/cifar_resnet.py /tmp/p.patch
Run from the directory the analyze ran in (its config's call sites are relative to it).
"""

import json
import sys
from pathlib import Path

from advisor.fixes import make_patch


def main(run_dir: str, script: str, out: str) -> None:
    doc = json.loads((Path(run_dir) / "run.json").read_text())
    stack = [*(doc.get("applied") or []), *(doc["trial_summary"].get("stack") or [])]
    fixes = [{"intervention": f["name"], "params": f.get("params") or {}} for f in stack]
    path = Path(script).absolute()
    diff, notes = make_patch(str(path), fixes, doc["config"], root=str(path.parent))
    Path(out).write_text(diff)
    for n in notes:
        print(n["intervention"], "applied" if n.get("applied") else f"NOT applied: {n.get('reason')}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
