"""ResNet-18 on CIFAR-sized synthetic images, written the FAST way (the control for cifar_resnet.py).

Same model, same synthetic data, same default batch and image size as cifar_resnet.py, so
samples/s is directly comparable. What differs:

  * bf16 autocast on CUDA (fp16 + GradScaler where bf16 is unsupported; plain fp32 on CPU);
  * channels_last model and inputs; torch.backends.cudnn.benchmark = True;
  * the uint8 dataset is held on the device and each batch is one gather there from a
    permutation made there (same shuffle and epochs), normalized on the GPU; --data workers instead
    reads a uint8 Dataset with DataLoader(num_workers=min(8, cpus), pin_memory,
    persistent_workers) and non_blocking copies (it stalls at each epoch start);
  * optimizer.zero_grad(set_to_none=True); SGD(fused=True) on CUDA (foreach=True on CPU);
  * loss.item() only when a loss line is printed;
  * on CUDA, torch.compile(mode="reduce-overhead"): CUDA graphs replay the step's kernels,
    which an eager ResNet-18 at 32x32 cannot launch fast enough to keep a fast GPU busy
    (benchmarks/RESULTS.md has the eager and graphed steps). --compile off
    gives the eager recipe.

    python3 examples/cifar_resnet_tuned.py
    python3 examples/cifar_resnet_tuned.py --steps 30 --device cpu
"""

import argparse
import math
import os
import random
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)
NUM_CLASSES = 10


def parse_args(argv=None):
    default_device = "cuda" if torch.cuda.is_available() else "cpu"
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=default_device)
    p.add_argument("--batch-size", type=int, default=None, help="default: 2048 on cuda, 32 on cpu (see cifar_resnet.py)")
    p.add_argument("--epochs", type=int, default=None, help="default: 15 on cuda, 1 on cpu")
    p.add_argument("--steps", type=int, default=None, help="stop after this many optimizer steps in total")
    p.add_argument("--num-samples", type=int, default=None,
                   help="synthetic images per epoch; default: 50000 on cuda, 40 batches on cpu")
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=None, help="default: 0.02 * batch_size / 32, at most 0.1")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--data", choices=["device", "workers"], default="device",
                   help="device: the uint8 dataset held on the device, batches gathered there "
                        "(no DataLoader); "
                        "workers: a per-sample Dataset read by DataLoader workers (--workers)")
    p.add_argument("--workers", type=int, default=None,
                   help="DataLoader workers with --data workers; default: min(8, cpus) on cuda, 0 on cpu")
    p.add_argument("--amp", choices=["auto", "bf16", "fp16", "off"], default="auto",
                   help="auto: bf16 on CUDA when supported, else fp16 + GradScaler; off on CPU")
    p.add_argument("--compile", choices=["auto", "off", "default", "reduce-overhead"], default="auto",
                   help="torch.compile the model (reduce-overhead: with CUDA graphs); "
                        "auto: reduce-overhead on cuda, off on cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--warmup-steps", type=int, default=5,
                   help="steps left out of the final samples/s (start-up, cudnn autotuning)")
    p.add_argument("--log-every", type=int, default=10, help="print the loss every N steps")
    p.add_argument("--save", default=None, metavar="PATH", help="save a checkpoint here at the end")
    args = p.parse_args(argv)
    on_gpu = args.device.startswith("cuda")
    if args.batch_size is None:
        args.batch_size = 2048 if on_gpu else 32
    if args.epochs is None:
        args.epochs = 15 if on_gpu else 1
    if args.num_samples is None:
        args.num_samples = 50000 if on_gpu else 40 * args.batch_size
    if args.lr is None:
        args.lr = min(0.1, 0.02 * args.batch_size / 32)
    if args.compile == "auto":
        args.compile = "reduce-overhead" if on_gpu else "off"
    if args.workers is None:
        # On a CPU-only machine the trainer needs the cores itself and the per-sample work is
        # a uint8 index, so worker processes cost more than they save.
        args.workers = min(8, os.cpu_count() or 1) if on_gpu else 0
    return args


def make_synthetic_cifar(n, image_size, seed):
    """n uint8 images (n, 3, H, W) and int64 labels; class-dependent low-frequency patterns.

    Identical to cifar_resnet.make_synthetic_cifar (same seed -> same data)."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, NUM_CLASSES, (n,), generator=g)
    patterns = torch.rand(NUM_CLASSES, 3, 4, 4, generator=g)
    patterns = F.interpolate(patterns, size=(image_size, image_size), mode="bilinear", align_corners=False)
    images = torch.empty(n, 3, image_size, image_size, dtype=torch.uint8)
    chunk = 4096
    for start in range(0, n, chunk):
        lab = labels[start:start + chunk]
        noise = torch.randn(len(lab), 3, image_size, image_size, generator=g) * 0.3
        img = (0.5 + 0.2 * (patterns[lab] - 0.5) + noise).clamp_(0, 1)
        images[start:start + chunk] = (img * 255).round_().to(torch.uint8)
    return images, labels


class SyntheticCIFARUint8(torch.utils.data.Dataset):
    """Returns raw uint8 images; conversion and normalization happen on the device, per batch."""

    def __init__(self, images, labels):
        self.images = images
        self.labels = labels

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.images[i], self.labels[i]


class DeviceBatches:
    """Shuffled batches of tensors held on the device (drop_last, a new permutation per epoch)."""

    def __init__(self, images, labels, batch_size):
        self.images, self.labels, self.batch_size = images, labels, batch_size

    def __len__(self):
        return len(self.labels) // self.batch_size

    def __iter__(self):
        perm = torch.randperm(len(self.labels), device=self.labels.device)
        for i in range(len(self)):
            idx = perm[i * self.batch_size:(i + 1) * self.batch_size]
            yield self.images[idx], self.labels[idx]


def build_model():
    return torchvision.models.resnet18(weights=None, num_classes=NUM_CLASSES)


def pick_amp(args, device):
    """-> (autocast dtype or None, use GradScaler)."""
    if args.amp == "off" or (args.amp == "auto" and device.type != "cuda"):
        return None, False
    if args.amp == "bf16" or (args.amp == "auto" and torch.cuda.is_bf16_supported()):
        return torch.bfloat16, False
    return torch.float16, device.type == "cuda"


def main(argv=None):
    args = parse_args(argv)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    on_gpu = device.type == "cuda"
    torch.backends.cudnn.benchmark = True

    images, labels = make_synthetic_cifar(args.num_samples, args.image_size, args.seed)
    dataset = SyntheticCIFARUint8(images, labels)
    if args.data == "device":
        # The whole uint8 dataset lives on the device (150 MB for 50k CIFAR images) and each
        # batch is one gather from a permutation made there: no per-sample Python, no workers,
        # no copies, no stall at each epoch start (a DataLoader over indices still spends host
        # time every step building a list of one Python int per sample).
        loader = DeviceBatches(images.to(device), labels.to(device), args.batch_size)
    else:
        loader = torch.utils.data.DataLoader(
            dataset, batch_size=args.batch_size, shuffle=True, drop_last=True,
            num_workers=args.workers, pin_memory=on_gpu,
            persistent_workers=args.workers > 0)

    mean = torch.tensor(CIFAR_MEAN, device=device).view(1, 3, 1, 1) * 255.0
    std = torch.tensor(CIFAR_STD, device=device).view(1, 3, 1, 1) * 255.0

    model = build_model().to(device, memory_format=torch.channels_last)
    if args.compile != "off":
        model.compile(mode=None if args.compile == "default" else args.compile)
    criterion = nn.CrossEntropyLoss()
    if on_gpu:
        opt_kwargs = {"fused": True}
    else:
        opt_kwargs = {"foreach": True}
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum,
                                weight_decay=args.weight_decay, **opt_kwargs)
    amp_dtype, use_scaler = pick_amp(args, device)
    scaler = torch.amp.GradScaler("cuda", enabled=use_scaler)

    total_steps = args.epochs * len(loader)
    if args.steps is not None:
        total_steps = args.steps  # may span more (or fewer) epochs than --epochs
    epochs = math.ceil(total_steps / max(1, len(loader)))
    print(f"cifar_resnet_tuned: device={device} batch_size={args.batch_size} image_size={args.image_size} "
          f"samples={len(dataset)} steps={total_steps} amp={amp_dtype} data={args.data} compile={args.compile}", flush=True)

    model.train()
    step = 0
    t0 = time.perf_counter()
    t_measure = None
    last_loss = float("nan")
    for epoch in range(epochs):
        for inputs, targets in loader:
            inputs = inputs.to(device, non_blocking=True)
            targets = targets.to(device, non_blocking=True)
            inputs = inputs.float().sub_(mean).div_(std).contiguous(memory_format=torch.channels_last)
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(device_type=device.type, dtype=amp_dtype or torch.float32,
                                enabled=amp_dtype is not None):
                outputs = model(inputs)
                loss = criterion(outputs, targets)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            step += 1
            if step % args.log_every == 0 or step == total_steps:
                last_loss = loss.item()
                print(f"epoch {epoch + 1} step {step}/{total_steps} loss {last_loss:.4f}", flush=True)
            if step == args.warmup_steps:
                if device.type == "cuda":
                    torch.cuda.synchronize()
                t_measure = time.perf_counter()
            if step >= total_steps:
                break
        if step >= total_steps:
            break
    if on_gpu:
        torch.cuda.synchronize()
    t_end = time.perf_counter()
    if t_measure is None or step <= args.warmup_steps:  # too few steps to leave any out
        t_measure, measured = t0, step
    else:
        measured = step - args.warmup_steps
    rate = measured * args.batch_size / max(t_end - t_measure, 1e-9)
    print(f"done: {step} steps in {t_end - t0:.2f} s, {rate:.1f} samples/s "
          f"({(t_end - t_measure) / max(measured, 1) * 1000:.1f} ms/step over {measured} steps), "
          f"final loss {last_loss:.4f}", flush=True)
    if args.save:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, args.save)
        print(f"saved checkpoint to {args.save}", flush=True)


if __name__ == "__main__":
    main()
