"""``defer-syncs``: the script's per-step ``.item()`` reads kept on the device until printed."""

from __future__ import annotations

from advisor.fixes.base import Fix, value


def _device_item_sites(config: dict) -> int | None:
    sites = value(config, "item_calls").get("sites")
    return None if not isinstance(sites, dict) else sum(1 for s in sites.values() if isinstance(s, dict) and s.get("device"))


class DeferSyncs(Fix):
    name = "defer-syncs"
    runtime = "defer_syncs"
    editor = "advisor.patch.sync_fixes:defer_syncs"

    def check(self, config, params, base):
        """Fewer ``.item()`` reads of a device tensor than the baseline made (the edited sites
        read a detached tensor now). None where either run recorded no site at all."""
        before = _device_item_sites(base.get("config") or {})
        after = _device_item_sites(config)
        if not before:
            return None, "fewer .item() reads of a device tensor", "the baseline recorded none"
        got = after or 0
        return got < before, f"fewer than the baseline's {before} .item() sites on a device tensor", \
            f"{got} such sites"
