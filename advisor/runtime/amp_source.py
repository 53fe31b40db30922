"""The amp fix's binary cross-entropy as source text, torch-free: torch refuses
binary_cross_entropy under CUDA autocast ("unsafe to autocast"), and a GAN's BCELoss on its
discriminator's sigmoid is common. Under autocast it runs in float32, outside autocast (the
products before it stay in 16 bits). The trial executes this text in the child
(advisor/interventions/amp.py) and the patch writes it into the script
(advisor/patch/model_fixes.py), where its code names BCE: what the trial measured is what the
patch does."""

BCE_FLOAT32 = '''def _bce_float32(input, target, *args, _bce=torch.nn.functional.binary_cross_entropy, **kwargs):
    """binary_cross_entropy is refused under autocast: computed in float32, outside it."""
    if not torch.is_autocast_enabled(input.device.type):
        return _bce(input, target, *args, **kwargs)
    with torch.autocast(input.device.type, enabled=False):
        return _bce(input.float(), target.float(), *args, **kwargs)'''
BCE_INSTALL = "torch.nn.functional.binary_cross_entropy = _bce_float32"
