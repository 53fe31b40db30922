"""Does the script (or its patch) feed the loop from NVIDIA DALI? Read once, at the end of a run.

DALI's PyTorch iterators are found among the live objects, only where the script imported
DALI's PyTorch plugin: the verification of a dali patch checks that its batches came from
there, and the dali rule leaves alone a script that already uses DALI.
"""

from __future__ import annotations

import gc
import sys


def observed() -> dict | None:
    """{"iterators", "batch_size"} of the live DALI iterators, or None without DALI's plugin."""
    plugin = sys.modules.get("nvidia.dali.plugin.pytorch")
    base = getattr(plugin, "DALIGenericIterator", None) if plugin is not None else None
    if base is None:
        return None
    try:
        # type(o), not isinstance: isinstance reads o.__class__, which some modules' lazy
        # attributes answer with a deprecation warning
        found = [o for o in gc.get_objects() if issubclass(type(o), base)]
    except Exception:  # noqa: BLE001 - an observation never breaks the run
        return None
    sizes = sorted({int(getattr(o, "batch_size", 0) or 0) for o in found})
    return {"iterators": len(found), "batch_size": sizes[-1] if sizes else None}
