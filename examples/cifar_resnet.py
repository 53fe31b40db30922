"""ResNet-18 on CIFAR-sized synthetic images, written the SLOW (but common) way.

After the PyTorch "Training a classifier" (CIFAR-10) tutorial. Every choice here is a
deliberate, realistic inefficiency that advisor should find:

  * fp32 everywhere, NCHW memory format, cudnn.benchmark = False (set explicitly);
  * a Dataset whose __getitem__ converts uint8 -> float32 and normalizes on the CPU, per sample;
  * DataLoader(num_workers=0, pin_memory=False), `.to(device)` without non_blocking;
  * optimizer.zero_grad(set_to_none=False), SGD(foreach=False) (one kernel per parameter);
  * `running_loss += loss.item()` every step (a host-device sync per step).

cifar_resnet_tuned.py is the same model and data written the fast way.

The data is synthetic (no downloads): N uint8 images made once with a fixed seed; each class
has its own low-frequency colour pattern, so the labels are learnable and the loss falls.

    python3 examples/cifar_resnet.py                   # sizes itself to the device
    python3 examples/cifar_resnet.py --steps 30 --batch-size 16 --device cpu
"""

import argparse
import math
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
    p.add_argument("--batch-size", type=int, default=None, help="default: 2048 on cuda (at 256 even the tuned recipe is launch-bound on an H100), 32 on cpu")  # noqa: E501
    p.add_argument("--epochs", type=int, default=None, help="default: 15 on cuda, 1 on cpu")
    p.add_argument("--steps", type=int, default=None, help="stop after this many optimizer steps in total")
    p.add_argument("--num-samples", type=int, default=None,
                   help="synthetic images per epoch; default: 50000 on cuda, 40 batches on cpu")
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=None, help="default: 0.02 * batch_size / 32, at most 0.1")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=5e-4)
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
    return args


def make_synthetic_cifar(n, image_size, seed):
    """n uint8 images (n, 3, H, W) and int64 labels; class-dependent low-frequency patterns."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, NUM_CLASSES, (n,), generator=g)
    # one 3x4x4 colour pattern per class, upsampled: easy to learn, not trivially constant
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


class SyntheticCIFAR(torch.utils.data.Dataset):
    """Holds uint8 images; converts and normalizes ONE sample at a time on the CPU."""

    def __init__(self, images, labels):
        self.images = images
        self.labels = labels
        self.mean = torch.tensor(CIFAR_MEAN).view(3, 1, 1)
        self.std = torch.tensor(CIFAR_STD).view(3, 1, 1)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        img = self.images[i].to(torch.float32) / 255.0
        img = (img - self.mean) / self.std
        return img, int(self.labels[i])


def build_model():
    return torchvision.models.resnet18(weights=None, num_classes=NUM_CLASSES)


def main(argv=None):
    args = parse_args(argv)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    torch.backends.cudnn.benchmark = False

    images, labels = make_synthetic_cifar(args.num_samples, args.image_size, args.seed)
    dataset = SyntheticCIFAR(images, labels)
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, shuffle=True,
                                         num_workers=0, pin_memory=False, drop_last=True)

    model = build_model().to(device)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum,
                                weight_decay=args.weight_decay, foreach=False)
    total_steps = args.epochs * len(loader)
    if args.steps is not None:
        total_steps = args.steps  # may span more (or fewer) epochs than --epochs
    epochs = math.ceil(total_steps / max(1, len(loader)))
    print(f"cifar_resnet: device={device} batch_size={args.batch_size} image_size={args.image_size} "
          f"samples={len(dataset)} steps={total_steps}", flush=True)

    model.train()
    step = 0
    t0 = time.perf_counter()
    t_measure = None
    last_loss = float("nan")
    for epoch in range(epochs):
        running_loss = 0.0
        for i, (inputs, targets) in enumerate(loader):
            inputs = inputs.to(device)
            targets = targets.to(device)
            optimizer.zero_grad(set_to_none=False)
            outputs = model(inputs)
            loss = criterion(outputs, targets)
            loss.backward()
            optimizer.step()
            running_loss += loss.item()
            step += 1
            last_loss = loss.item()
            if step % args.log_every == 0 or step == total_steps:
                print(f"epoch {epoch + 1} step {step}/{total_steps} loss {last_loss:.4f} "
                      f"avg_loss {running_loss / (i + 1):.4f}", flush=True)
            if step == args.warmup_steps:
                if device.type == "cuda":
                    torch.cuda.synchronize()
                t_measure = time.perf_counter()
            if step >= total_steps:
                break
        if step >= total_steps:
            break
    if device.type == "cuda":
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
