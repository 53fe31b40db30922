"""The loop waits for images that the DataLoader's workers decode and augment on the CPU.

What it does:
    Reads the data waits of the timed window and the DataLoader the run observed: a dataset
    of image files (torchvision's ImageFolder, or a Dataset that opens paths it holds), its
    torchvision transforms, and the worker count against the host's cores. Fires when the
    loop still waits for batches on a GPU machine with workers on more than half the cores.
    The evidence gives what one sample costs in the dataset (and of that, PIL's decoding),
    measured on a few samples when the DataLoader was made, the most the workers can make
    at that cost, and the DALI operator each transform becomes.

Why is this bad:
    JPEG decoding and per-sample augmentation are CPU work that grows with the image and the
    batch; once the workers hold most of the cores, adding workers no longer feeds the GPU.
    A ResNet-18 over a folder of JPEGs in bf16 and channels_last waits for batches with 8
    workers and with 16; with DALI it steps far faster, close to its data-free ceiling
    (benchmarks/RESULTS.md, "The dali fix").

Example:
    dataset = datasets.ImageFolder(root, transforms.Compose([
        transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(),
        transforms.ToTensor(), transforms.Normalize(mean, std)]))
    loader = DataLoader(dataset, batch_size=256, shuffle=True, num_workers=16)

Fix:
    Decode on the GPU with nvJPEG and augment there with NVIDIA DALI (``dali``): a file
    reader over the dataset's own file list and labels, ``fn.decoders.image_random_crop`` for
    RandomResizedCrop (only the crop is decoded), ``fn.resize``, ``fn.crop``, ``fn.flip``,
    ``fn.color_twist``, and one ``fn.crop_mirror_normalize`` for ToTensor and Normalize,
    reshuffled every epoch, with the DataLoader's batch size and drop_last. advisor writes
    the pipeline as a class, ``_DaliLoader``, and the loader swap
    ``loader = _DaliLoader.replacing(DataLoader(...))``.

Fix safety:
    Changes numerics slightly: the same transforms, drawn from DALI's random streams, with
    nvJPEG's decoding and DALI's resampling instead of PIL's, and a colour jitter that
    applies its factors in one fixed order. Needs the ``nvidia-dali`` package matching
    torch's CUDA. advisor checks the labels and image shapes DALI gives against dataset[i];
    a transform it cannot map (Lambda, RandomRotation, AutoAugment, ...) refuses the fix.
"""

from ._common import fix, ms, pct

CODE = "ADV119"
NAME = "decode-bound-loader"
SEVERITY = "warning"
NEEDS = ("steps",)
FIX = "dali"
AFTER = ("dataloader-workers",)
HITS = ("imagefolder_workers16_h200",)
NON_HITS = {"gpu_run_h100_cifar_workers": "CIFAR tensors in memory, no image files to decode",
            "imagefolder_dali_h200": "the batches already come from DALI",
            "imagefolder_baseline_h200": "4 workers on 16 cores: more workers come first (ADV118)",
            "imagefolder_workers8_h200": "8 workers on 16 cores: more workers come first (ADV118)"}


def _rate(per_s: float) -> str:
    return f"{per_s:,.0f} samples/s"


def check(ctx):
    dl = ctx.value("dataloader") or {}
    plan = dl.get("dali") or {}
    # image files to decode, a GPU to decode them on, and no DALI in the script already
    if not plan.get("images") or not ctx.environment.get("gpu_count") or ctx.value("dali"):
        return None
    measured = ctx.analysis.get("measured") or {}
    frac = float(measured.get("data_wait_frac") or 0.0)
    workers = int(dl.get("num_workers") or 0)
    cpus = int(ctx.environment.get("cpu_count") or 0)
    if frac < ctx.thresholds.data_wait_frac or not cpus or 2 * workers <= cpus:
        return None   # below, more workers come first (ADV118 doubles them up to the cores)
    step = float(measured.get("step_ms") or 0.0)
    wait = float(measured.get("data_wait_ms_per_step") or 0.0)
    batch = int(dl.get("batch_size") or 0)
    evidence = [f"timed window: {ms(wait)} of each {ms(step)} step waiting for batches ({pct(frac)})",
                f"DataLoader: num_workers={workers} on {cpus} CPU cores; dataset {plan.get('kind') or dl.get('dataset_type')}"
                + (f", {plan['files']:,} files" if plan.get("files") else "")]
    cost = plan.get("cost") or {}
    if cost.get("item_ms"):
        item = float(cost["item_ms"])
        part = f" (PIL decode {ms(cost['decode_ms'])})" if cost.get("decode_ms") else ""
        line = f"a sample costs {ms(item)} in the dataset{part}: {workers} workers make at most {_rate(workers * 1e3 / item)}"
        if batch and step > wait:
            line += f"; the model consumes {_rate(batch * 1e3 / (step - wait))} between waits"
        evidence.append(line)
    if plan.get("source"):
        evidence.append("DALI: " + "; ".join(f"{a.split('(')[0]} -> {b}" for a, b in plan.get("mapping") or []))
        the_fix = fix("dali", changes_numerics=True, where=ctx.where("dataloader"),
                      code="loader = _DaliLoader.replacing(DataLoader(dataset, ...))   # class _DaliLoader: "
                           "fn.readers.file + fn.decoders.image(device='mixed') + the transforms as DALI operators")
    else:
        evidence.append(f"DALI cannot stand in for this loader: {plan['why_not']}")
        the_fix = fix("dali", changes_numerics=True, where=ctx.where("dataloader"), suggest_only=True,
                      code="# decode and augment on the GPU with NVIDIA DALI (fn.decoders.image(device='mixed'))")
    return {
        "severity": "warning",
        "message": (f"The loop waits {pct(frac)} of the timed window for images that {workers} workers decode and "
                    f"transform on {cpus} CPU cores."),
        "evidence": evidence,
        "estimated_gain_ms": wait,
        "fix": the_fix,
        "alternatives": ["gpu-augmentation"],
    }
