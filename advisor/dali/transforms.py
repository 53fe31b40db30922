"""torchvision transforms → NVIDIA DALI operators, written as the lines of a pipeline function.

``translate(transform, source)`` walks a ``Compose`` (v1 or v2) one transform at a time and
returns the body of the DALI pipeline that does the same work on the GPU, from the encoded
file to the tensor the DataLoader's collate would make, or the reason it cannot: the first
transform advisor has no DALI mapping for. The lines are the product: the dali fix executes
them at run time and writes the same lines into the user's script (advisor.dali.source).

The torchvision path works on a PIL image (HWC, uint8) until ToTensor; DALI keeps HWC uint8
through the geometric and colour operators and makes the layout, the dtype and the
normalization in one final ``crop_mirror_normalize`` (where a pending horizontal flip is
folded in too, as NVIDIA's ImageNet example does). Normalization is per channel and linear,
so moving it after a later crop or flip changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# What each supported transform becomes; anything else refuses the fix with its name.
SUPPORTED = ("Resize", "RandomResizedCrop", "RandomCrop", "CenterCrop", "RandomHorizontalFlip",
             "RandomVerticalFlip", "ColorJitter", "ToTensor", "PILToTensor", "ToImage", "ConvertImageDtype",
             "ToDtype", "Normalize")

# torchvision's InterpolationMode values → DALI interpolation types (box and hamming have none)
_INTERP = {"nearest": "INTERP_NN", "nearest-exact": "INTERP_NN", "bilinear": "INTERP_LINEAR",
           "bicubic": "INTERP_CUBIC", "lanczos": "INTERP_LANCZOS3"}


class Untranslatable(Exception):
    """The transform has no DALI mapping here; the message says which and why."""


@dataclass
class Translation:
    lines: list[str]                  # the pipeline body after the reader, ending in `return images, label`
    mapping: list[tuple[str, str]]    # (torchvision transform, DALI operators) for the report
    channels: int                     # 3 (RGB) or 1 (GRAY)
    dtype: str                        # "float32" or "uint8": what the batch holds
    size: tuple[int, int] | None      # (H, W) of every image, when the transforms fix it
    random: bool = False              # draws anew each epoch


@dataclass
class _State:
    lines: list[str] = field(default_factory=list)
    mapping: list[tuple[str, str]] = field(default_factory=list)
    decoded: bool = False
    tensor: bool = False          # ToTensor/PILToTensor/ToImage happened: CHW from here on
    scale: float = 1.0            # the tensor's values per uint8 unit (1/255 after ToTensor)
    floating: bool = False
    mean: list[float] | None = None
    std: list[float] | None = None
    mirror: str | None = None     # a horizontal flip waiting to be folded into the output
    size: tuple[int, int] | None = None
    random: bool = False


def _short(t, width: int = 72) -> str:
    """The transform's repr on one line, ASCII, cut to ``width`` (it goes into the user's code)."""
    text = " ".join(repr(t).split()).encode("ascii", "replace").decode()
    return text if len(text) <= width else text[:width - 3] + "..."


def _interp(t) -> str:
    mode = getattr(t, "interpolation", "bilinear")
    name = str(getattr(mode, "value", mode)).lower()
    if name not in _INTERP:
        raise Untranslatable(f"{type(t).__name__} with interpolation={name!r} has no DALI equivalent")
    return f"types.{_INTERP[name]}"


def _antialias(t, interp: str) -> str:
    # PIL antialiases whenever it shrinks; tensor inputs follow `antialias`. DALI's default is on.
    if interp == "types.INTERP_NN":
        return "False"
    return "False" if getattr(t, "antialias", True) is False else "True"


def _hw(size) -> tuple[int, int]:
    if isinstance(size, int):
        return size, size
    size = list(size)
    return (int(size[0]), int(size[0])) if len(size) == 1 else (int(size[0]), int(size[1]))


def _floats(values) -> list[float]:
    return [round(float(v), 6) for v in (values if isinstance(values, (list, tuple)) else [values])]


def _rng(low: float, high: float) -> str:
    return f"fn.random.uniform(range=[{low!r}, {high!r}])"


def flatten(transform) -> list:
    """The transforms in the order they run: Compose (v1, v2) and nn.Sequential unpacked."""
    if transform is None:
        return []
    inner = getattr(transform, "transforms", None)
    if type(transform).__name__ == "Compose" and isinstance(inner, (list, tuple)):
        return [t for x in inner for t in flatten(x)]
    if type(transform).__name__ == "Sequential":
        return [t for x in transform.children() for t in flatten(x)]
    return [transform]


def translate(transform, *, gray: bool = False, decoded_tensor: bool = False) -> Translation:
    """The DALI pipeline body for ``transform`` applied to each decoded file. ``gray``: the
    dataset opens its files in mode "L"; ``decoded_tensor``: it reads them as uint8 CHW tensors
    (torchvision.io.read_image). Raises Untranslatable."""
    st = _State(tensor=decoded_tensor)
    steps = flatten(transform)
    for t in steps:
        module = type(t).__module__ or ""
        name = type(t).__name__
        if not module.startswith("torchvision.transforms") or name not in SUPPORTED:
            where = "" if module.startswith("torchvision") else f" ({module})"
            raise Untranslatable(f"transform {name}{where} has no DALI equivalent in advisor "
                                 f"(it maps {', '.join(SUPPORTED)})")
        if not st.decoded:
            _decode(st, t if name == "RandomResizedCrop" else None, gray)
            if name == "RandomResizedCrop":
                continue
        _step(st, t, name)
    if not st.decoded:
        _decode(st, None, gray)
    if not st.tensor:
        raise Untranslatable("the transforms end in a PIL image (no ToTensor, PILToTensor or ToImage): "
                             "the DataLoader could not collate it")
    _output(st, 1 if gray else 3)
    return Translation(st.lines + ["return images, label"], st.mapping, 1 if gray else 3,
                       "float32" if st.floating else "uint8", st.size, st.random)


def _decode(st: _State, rrc, gray: bool) -> None:
    out = "types.GRAY" if gray else "types.RGB"
    # nvJPEG's buffers allocated up front (NVIDIA's ImageNet example): grown on demand, their
    # pinned and device allocations stall a step after the warm-up (docs/trials.md)
    device = 'device="mixed" if gpu else "cpu", device_memory_padding=211025920 if gpu else 0, ' \
             'host_memory_padding=140544512 if gpu else 0'
    if rrc is None:
        st.lines.append(f"images = fn.decoders.image(encoded, {device}, output_type={out})")
        st.mapping.append(("decode (PIL.Image.open)", "fn.decoders.image (nvJPEG on the GPU)"))
    else:   # decode only the random window (NVIDIA's ImageNet example), then resize it
        scale, ratio = _floats(rrc.scale), _floats(rrc.ratio)
        h, w = _hw(rrc.size)
        interp = _interp(rrc)
        st.lines.append(f"images = fn.decoders.image_random_crop(encoded, {device}, output_type={out}, "
                        f"random_area={scale}, random_aspect_ratio={ratio}, num_attempts=10)  # {_short(rrc)}")
        st.lines.append(f"images = fn.resize(images, resize_x={w}, resize_y={h}, interp_type={interp}, "
                        f"antialias={_antialias(rrc, interp)})")
        st.mapping.append((_short(rrc), "fn.decoders.image_random_crop + fn.resize (decodes only the crop)"))
        st.size, st.random = (h, w), True
    st.decoded = True


def _flush_mirror(st: _State) -> None:
    """A flip waiting for the output goes in before a later geometric step."""
    if st.mirror is not None:
        st.lines.append(f"images = fn.flip(images, horizontal={st.mirror})")
        st.mirror = None


def _step(st: _State, t, name: str) -> None:
    here = _short(t)
    if name in ("Resize", "RandomResizedCrop", "RandomCrop", "CenterCrop", "RandomVerticalFlip"):
        _flush_mirror(st)
    if name == "Resize":
        interp = _interp(t)
        size = t.size
        if size is None:
            raise Untranslatable(f"{here}: Resize without a size (max_size only) is not mapped")
        extra = f", max_size={int(t.max_size)}" if getattr(t, "max_size", None) else ""
        if isinstance(size, int) or len(size) == 1:
            s = size if isinstance(size, int) else int(size[0])
            st.lines.append(f"images = fn.resize(images, resize_shorter={s}{extra}, interp_type={interp}, "
                            f"antialias={_antialias(t, interp)})  # {here}")
            st.size = None
        else:
            h, w = _hw(size)
            st.lines.append(f"images = fn.resize(images, resize_x={w}, resize_y={h}, interp_type={interp}, "
                            f"antialias={_antialias(t, interp)})  # {here}")
            st.size = (h, w)
        st.mapping.append((here, "fn.resize"))
    elif name == "RandomResizedCrop":
        h, w = _hw(t.size)
        interp = _interp(t)
        st.lines.append(f"images = fn.random_resized_crop(images, size=[{h}, {w}], random_area={_floats(t.scale)}, "
                        f"random_aspect_ratio={_floats(t.ratio)}, interp_type={interp}, "
                        f"antialias={_antialias(t, interp)})  # {here}")
        st.mapping.append((here, "fn.random_resized_crop"))
        st.size, st.random = (h, w), True
    elif name in ("RandomCrop", "CenterCrop"):
        padding = getattr(t, "padding", None)
        if padding not in (None, 0) and any(_floats(padding)) or getattr(t, "pad_if_needed", False):
            raise Untranslatable(f"{here}: RandomCrop with padding is not mapped to DALI by advisor")
        h, w = _hw(t.size)
        pos = (f", crop_pos_x={_rng(0.0, 1.0)}, crop_pos_y={_rng(0.0, 1.0)}" if name == "RandomCrop" else "")
        st.lines.append(f"images = fn.crop(images, crop=[{h}, {w}]{pos}, out_of_bounds_policy=\"pad\")  # {here}")
        st.mapping.append((here, "fn.crop" + (" at a random position" if pos else "")))
        st.size = (h, w)
        st.random = st.random or name == "RandomCrop"
    elif name in ("RandomHorizontalFlip", "RandomVerticalFlip"):
        coin = f"fn.random.coin_flip(probability={float(t.p)!r})"
        if name == "RandomHorizontalFlip":
            _flush_mirror(st)     # two in a row: the first one is applied
            st.mirror = coin
            st.mapping.append((here, "crop_mirror_normalize(mirror=coin flip)"))
        else:
            st.lines.append(f"images = fn.flip(images, vertical={coin})  # {here}")
            st.mapping.append((here, "fn.flip(vertical=coin flip)"))
        st.random = True
    elif name == "ColorJitter":
        _color_jitter(st, t, here)
    elif name in ("ToTensor", "PILToTensor", "ToImage"):
        st.tensor = True
        if name == "ToTensor":
            st.scale, st.floating = 1 / 255, True
        st.mapping.append((here, "crop_mirror_normalize(output_layout=\"CHW\")"))
    elif name in ("ConvertImageDtype", "ToDtype"):
        dtype = str(getattr(t, "dtype", ""))
        if isinstance(getattr(t, "dtype", None), dict):
            raise Untranslatable(f"{here}: ToDtype with a dtype per input type is not mapped")
        if "float" not in dtype:
            raise Untranslatable(f"{here}: conversion to {dtype} is not mapped (float only)")
        if not st.floating:
            scaled = name == "ConvertImageDtype" or bool(getattr(t, "scale", False))
            st.scale, st.floating = (1 / 255 if scaled else 1.0), True
        st.mapping.append((here, "crop_mirror_normalize(dtype=types.FLOAT)"))
    elif name == "Normalize":
        if not st.floating:
            raise Untranslatable(f"{here}: Normalize on a uint8 image is not mapped")
        if st.mean is not None:
            raise Untranslatable(f"{here}: a second Normalize is not mapped")
        st.mean, st.std = _floats(t.mean), _floats(t.std)
        st.mapping.append((here, "crop_mirror_normalize(mean, std)"))


def _color_jitter(st: _State, t, here: str) -> None:
    if st.mean is not None:   # before it, on [0, 1] floats, the same factors act as on uint8
        raise Untranslatable(f"{here}: ColorJitter after Normalize is not mapped")
    args = []
    for key in ("brightness", "contrast", "saturation"):
        rng = getattr(t, key, None)
        if rng is not None and tuple(rng) != (1, 1):
            args.append(f"{key}={_rng(*_floats(rng))}")
    hue = getattr(t, "hue", None)
    if hue is not None and tuple(hue) != (0, 0):
        lo, hi = _floats(hue)
        args.append(f"hue={_rng(round(lo * 360, 4), round(hi * 360, 4))}")  # a turn's fraction → degrees
    if not args:
        st.mapping.append((here, "nothing (no jitter asked for)"))
        return
    # torchvision applies the four in a random order and centres contrast on the image's mean;
    # DALI applies one colour twist (contrast about mid-grey): the same ranges, a close distribution.
    st.lines.append(f"images = fn.color_twist(images, {', '.join(args)})  # {here}")
    st.mapping.append((here, "fn.color_twist (random factors in the same ranges)"))
    st.random = True


def _output(st: _State, channels: int) -> None:
    """One crop_mirror_normalize: CHW layout, dtype, scaling and normalization (and a flip)."""
    mean = st.mean or [0.0]
    std = st.std or [1.0]
    if len(mean) == 1:
        mean = mean * channels
    if len(std) == 1:
        std = std * channels
    if len(mean) != channels or len(std) != channels:
        raise Untranslatable(f"Normalize has {len(mean)} means for {channels}-channel images")
    # (x * scale - m) / s  ==  (x - m / scale) / (s / scale): DALI normalizes the uint8 values
    mean = [round(m / st.scale, 4) for m in mean]
    std = [round(s / st.scale, 4) for s in std]
    dtype = "types.FLOAT" if st.floating else "types.UINT8"
    mirror = f", mirror={st.mirror}" if st.mirror else ""
    st.lines.append(f"images = fn.crop_mirror_normalize(images, dtype={dtype}, output_layout=\"CHW\", "
                    f"mean={mean}, std={std}{mirror})")
    st.mirror = None
