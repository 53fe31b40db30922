"""What the runner records of a DataLoader: its settings, its transforms, and whether NVIDIA
DALI could stand in for it (advisor.dali.plan: the code and a sample's measured cost)."""

from __future__ import annotations


def loader_value(loader) -> dict:
    ds = loader.dataset
    bs = loader.batch_size
    if bs is None:
        bs = getattr(getattr(loader, "batch_sampler", None), "batch_size", None)
    tf = getattr(ds, "transform", None) or getattr(ds, "transforms", None)
    inner = getattr(ds, "dataset", None)  # Subset and friends
    if tf is None and inner is not None:
        tf = getattr(inner, "transform", None) or getattr(inner, "transforms", None)
    tf_text = None
    if tf is not None:
        tf_text = " ".join(repr(tf).split())
        if len(tf_text) > 500:
            tf_text = tf_text[:499] + "…"
    return {
        "batch_size": bs,
        "num_workers": loader.num_workers,
        "pin_memory": bool(loader.pin_memory),
        "persistent_workers": bool(loader.persistent_workers),
        "prefetch_factor": loader.prefetch_factor,
        "dataset_type": type(ds).__name__,
        "transforms": tf_text,
        "dali": dali_plan(loader),
    }


def dali_plan(loader) -> dict:
    """Whether NVIDIA DALI can stand in for this loader, with the code and a sample's cost;
    the rule, the trial and the patch read it from the config."""
    try:
        from advisor.dali.plan import plan

        return plan(loader)
    except Exception as e:  # noqa: BLE001 - an observation never breaks the script
        return {"why_not": f"advisor could not plan a DALI pipeline: {type(e).__name__}: {e}"}
