"""The dynamic-padding fix's function as source text, torch-free: the patch writes it into the
script (advisor/patch/padding_fix.py) and the trial executes the same text in the child
(advisor/fixes/dynamic_padding.py), so what the trial measured is what the patch does."""

TRIM = '''
def _trim_padding(collate):
    """`collate`, each batch then cut to its longest text: the columns that are padding in
    every row (its attention mask's zeros) dropped from every tensor as wide as the mask
    (added by advisor's dynamic-padding fix)."""
    from collections.abc import Mapping

    import torch

    def trimmed(samples):
        batch = collate(samples)
        mask = batch.get("attention_mask") if isinstance(batch, Mapping) else None
        if not isinstance(mask, torch.Tensor) or mask.dim() != 2:
            return batch
        used = mask.any(0).nonzero()
        if not len(used):
            return batch
        lo, hi, width = int(used[0]), int(used[-1]) + 1, mask.shape[1]
        for key, value in list(batch.items()):
            if isinstance(value, torch.Tensor) and value.dim() >= 2 and value.shape[1] == width:
                batch[key] = value[:, lo:hi]
        return batch

    return trimmed
'''.strip() + "\n"
