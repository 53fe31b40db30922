"""ResNet-18 trained from a folder of JPEGs via torchvision ImageFolder: a CPU-decode-bound loader.

After the PyTorch ImageNet example (examples/imagenet/main.py): datasets.ImageFolder, PIL decode,
RandomResizedCrop / RandomHorizontalFlip / ToTensor / Normalize, all on the DataLoader's CPU
workers. The images are synthetic: small JPEGs written with PIL into a temporary directory
(class subfolders, deleted at exit) or into --out DIR (kept, and reused when it already holds
a matching set). Each class has its own colour and stripe pattern, so the loss falls.

    python3 examples/imagefolder.py
    python3 examples/imagefolder.py --steps 20 --batch-size 16 --image-size 64 --device cpu
"""

import argparse
import json
import math
import os
import random
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn
import torchvision
from PIL import Image
from torchvision import datasets, transforms

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def parse_args(argv=None):
    default_device = "cuda" if torch.cuda.is_available() else "cpu"
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=default_device)
    p.add_argument("--batch-size", type=int, default=None, help="default: 256 on cuda, 16 on cpu")
    p.add_argument("--epochs", type=int, default=None, help="default: 6 on cuda, 1 on cpu")
    p.add_argument("--steps", type=int, default=None, help="stop after this many optimizer steps in total")
    p.add_argument("--image-size", type=int, default=None, help="crop size; default: 224 on cuda, 64 on cpu")
    p.add_argument("--source-size", type=int, default=None,
                   help="side of the generated JPEGs; default: image_size * 8 / 7 (256 for 224)")
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--num-images", type=int, default=None,
                   help="JPEGs to generate in all; default: 10000 on cuda, 40 batches on cpu")
    p.add_argument("--workers", type=int, default=None,
                   help="DataLoader workers; default: 4 on cuda (as the ImageNet example), 0 on cpu")
    p.add_argument("--lr", type=float, default=None, help="default: 0.1 * batch_size / 256")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=1e-4)
    p.add_argument("--out", default=None, metavar="DIR",
                   help="write (and reuse) the generated JPEGs here instead of a temporary directory")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--warmup-steps", type=int, default=5,
                   help="steps left out of the final samples/s (start-up, cudnn autotuning)")
    p.add_argument("--log-every", type=int, default=10, help="print the loss every N steps")
    p.add_argument("--save", default=None, metavar="PATH", help="save a checkpoint here at the end")
    args = p.parse_args(argv)
    on_gpu = args.device.startswith("cuda")
    if args.batch_size is None:
        args.batch_size = 256 if on_gpu else 16
    if args.epochs is None:
        args.epochs = 6 if on_gpu else 1
    if args.image_size is None:
        args.image_size = 224 if on_gpu else 64
    if args.source_size is None:
        args.source_size = args.image_size * 8 // 7
    if args.num_images is None:
        args.num_images = 10000 if on_gpu else 40 * args.batch_size
    if args.workers is None:
        args.workers = 4 if on_gpu else 0
    if args.lr is None:
        args.lr = 0.1 * args.batch_size / 256
    return args


def _class_bases(classes, size, seed):
    """Per class: a colour plus an oriented stripe pattern, as float32 (size, size, 3)."""
    rng = np.random.default_rng(seed)
    colours = rng.uniform(40, 215, size=(classes, 3))
    periods = rng.uniform(4, 16, size=classes)
    angles = rng.uniform(0, np.pi, size=classes)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    bases = []
    for c in range(classes):
        proj = xx * np.cos(angles[c]) + yy * np.sin(angles[c])
        stripes = 40.0 * np.sin(2 * np.pi * proj / periods[c])
        bases.append((colours[c][None, None, :] + stripes[:, :, None]).astype(np.float32))
    return bases


def _write_jpegs(root, indices, classes, size, seed):
    bases = _class_bases(classes, size, seed)
    bank = np.random.default_rng([seed, 1]).normal(0, 25, size=(2 * size, 2 * size, 3)).astype(np.float32)
    for i in indices:
        rng = np.random.default_rng([seed, 2, i])
        c = i % classes
        dy, dx = rng.integers(0, size, size=2)
        img = bases[c] + bank[dy:dy + size, dx:dx + size]
        Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(
            os.path.join(root, f"class_{c:02d}", f"{i:06d}.jpg"), quality=90)


def generate_jpegs(root, num_images, classes, size, seed):
    """Write num_images JPEGs into root/class_XX/NNNNNN.jpg; reuse them if root already matches.

    Deterministic for a given seed; spread over processes when there are many."""
    spec = {"num_images": num_images, "classes": classes, "size": size, "seed": seed, "version": 2}
    marker = os.path.join(root, "dataset.json")
    if os.path.exists(marker):
        with open(marker) as f:
            if json.load(f) == spec:
                return
    for c in range(classes):
        os.makedirs(os.path.join(root, f"class_{c:02d}"), exist_ok=True)
    procs = min(os.cpu_count() or 1, 16, max(1, num_images // 500))
    if procs <= 1:
        _write_jpegs(root, range(num_images), classes, size, seed)
    else:
        import concurrent.futures
        import multiprocessing
        chunks = [range(k, num_images, procs) for k in range(procs)]
        with concurrent.futures.ProcessPoolExecutor(procs, mp_context=multiprocessing.get_context("fork")) as ex:
            for f in [ex.submit(_write_jpegs, root, ch, classes, size, seed) for ch in chunks]:
                f.result()
    with open(marker, "w") as f:
        json.dump(spec, f)


def train(args, data_root):
    device = torch.device(args.device)
    on_gpu = device.type == "cuda"
    transform = transforms.Compose([
        transforms.RandomResizedCrop(args.image_size, scale=(0.35, 1.0)),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD),
    ])
    dataset = datasets.ImageFolder(data_root, transform=transform)
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, shuffle=True, drop_last=True,
                                         num_workers=args.workers, pin_memory=on_gpu)

    model = torchvision.models.resnet18(weights=None, num_classes=len(dataset.classes)).to(device)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum,
                                weight_decay=args.weight_decay)

    total_steps = args.epochs * len(loader)
    if args.steps is not None:
        total_steps = args.steps
    epochs = math.ceil(total_steps / max(1, len(loader)))
    print(f"imagefolder: device={device} batch_size={args.batch_size} image_size={args.image_size} "
          f"images={len(dataset)} workers={args.workers} steps={total_steps}", flush=True)

    model.train()
    step = 0
    t0 = time.perf_counter()
    t_measure = None
    last_loss = float("nan")
    for epoch in range(epochs):
        for images, target in loader:
            images = images.to(device, non_blocking=True)
            target = target.to(device, non_blocking=True)
            output = model(images)
            loss = criterion(output, target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
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


def main(argv=None):
    args = parse_args(argv)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    t0 = time.perf_counter()
    if args.out:
        data_root = os.path.join(args.out, "imagefolder-data")
        generate_jpegs(data_root, args.num_images, args.classes, args.source_size, args.seed)
        print(f"data: {data_root} ({time.perf_counter() - t0:.1f} s)", flush=True)
        train(args, data_root)
    else:
        with tempfile.TemporaryDirectory(prefix="imagefolder-") as tmp:
            generate_jpegs(tmp, args.num_images, args.classes, args.source_size, args.seed)
            print(f"data: {args.num_images} JPEGs in a temporary directory "
                  f"({time.perf_counter() - t0:.1f} s)", flush=True)
            train(args, tmp)


if __name__ == "__main__":
    main()
