"""The float8-training fix's function as source text, torch-free: the patch writes it into the
script (advisor/patch/float8.py) and the trial executes the same text in the child
(advisor/fixes/float8_training.py), so what the trial measured is what the patch does."""

from advisor.runtime import MIN_VOCAB

FLOAT8 = '''
def _float8_training(model):
    """torchao's float8 training in `model`: its nn.Linear layers large enough for FP8 GEMMs to
    pay (torchao's own filter for its tensorwise recipe: dimensions multiples of 16, not small)
    swapped for Float8Linear, which casts inputs, weights and gradients to FP8 with dynamic
    scales in each forward and backward; the output layer over a vocabulary (%(vocab)s outputs or
    more) stays in high precision, as torchao's recipes keep it (added by advisor's
    float8-training fix). Returns the model."""
    import torch
    from torchao.float8 import _auto_filter_for_recipe, convert_to_float8_training

    inner = getattr(model, "module", model)   # inside DataParallel / DistributedDataParallel
    heads = [(name, m) for name, m in inner.named_modules()
             if isinstance(m, torch.nn.Linear) and m.out_features >= %(vocab)d and name]
    keep = [max(heads, key=lambda item: item[1].out_features)[0]] if heads else []
    convert_to_float8_training(inner, module_filter_fn=_auto_filter_for_recipe("tensorwise", filter_fqns=keep))
    return model
'''.strip() % {"vocab": MIN_VOCAB} + "\n"
