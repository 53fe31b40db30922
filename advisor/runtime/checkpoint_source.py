"""The activation-checkpointing fix's function as source text, torch-free: the patch writes it
into the script (advisor/patch/checkpointing.py) and the trial executes the same text in the
child (advisor/interventions/activation_checkpointing.py), so what the trial measured is what the
patch does."""

CHECKPOINT = '''
def _checkpoint_blocks(model):
    """Activation checkpointing in `model`: a Hugging Face model's own
    (gradient_checkpointing_enable), else each child of its largest list of same-class blocks
    (a transformer's layers) runs through torch.utils.checkpoint while it trains with grad
    enabled: its activations are computed again in the backward instead of kept (added by
    advisor's activation-checkpointing fix). Returns the model."""
    import functools

    import torch
    import torch.utils.checkpoint

    inner = getattr(model, "module", model)   # inside DataParallel / DistributedDataParallel
    enable = getattr(inner, "gradient_checkpointing_enable", None)
    if callable(enable) and getattr(inner, "supports_gradient_checkpointing", False):
        enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        return model
    best, most = [], 0
    for m in inner.modules():
        kids = list(m.children()) if isinstance(m, (torch.nn.ModuleList, torch.nn.Sequential)) else []
        if len(kids) >= 2 and len({type(k) for k in kids}) == 1:
            n = sum(p.numel() for k in kids for p in k.parameters())
            if n > most:
                best, most = kids, n

    def checkpointed(block):
        forward = block.forward

        @functools.wraps(forward)
        def run(*args, **kwargs):
            if block.training and torch.is_grad_enabled():
                return torch.utils.checkpoint.checkpoint(forward, *args, use_reentrant=False, **kwargs)
            return forward(*args, **kwargs)
        return run

    for block in best:
        block.forward = checkpointed(block)
    return model
'''.strip() + "\n"
