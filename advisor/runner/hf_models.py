"""What a Hugging Face model says of itself, read by duck typing (transformers is never
imported here): the attention implementation its config selects, and which ones its class
supports. A model is any module whose config carries ``_attn_implementation``."""

from __future__ import annotations

import importlib.util


def attention_of(module) -> dict | None:
    """{"implementation", "class", "sdpa", "flash"} of the first module (module itself, or one
    inside a wrapper) whose config names its attention implementation; None when none does."""
    try:
        for m in module.modules():
            impl = getattr(getattr(m, "config", None), "_attn_implementation", None)
            if isinstance(impl, str):
                cls = type(m)
                flash = bool(getattr(cls, "_supports_flash_attn", None) or getattr(cls, "_supports_flash_attn_2", None))
                return {"implementation": impl, "class": cls.__name__,
                        "sdpa": bool(getattr(cls, "_supports_sdpa", False)),
                        "flash": flash and importlib.util.find_spec("flash_attn") is not None}
    except Exception:   # a module whose attributes raise: nothing to say
        return None
    return None
