"""ResNet-50 trained on one GPU (or on all of them through nn.DataParallel): GPU-bound.

The single-process layout most training scripts start from: a model on "cuda", a DataLoader
over a dataset of uint8 images (synthetic, 224 px, 1000 classes; epochs as long as ImageNet-sized
ones, 250 steps, drawn from a pool of distinct images held in memory), normalized on the GPU.
With --data-parallel the model is wrapped in nn.DataParallel, as the PyTorch ImageNet example
does when it is given no --gpu.

    python3 examples/resnet_single_gpu.py
    python3 examples/resnet_single_gpu.py --data-parallel
"""

import argparse
import time

import torch
import torch.nn as nn
import torchvision


def parse_args():
    gpu = torch.cuda.is_available()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", default="resnet50" if gpu else "resnet18")
    p.add_argument("--batch-size", type=int, default=256 if gpu else 8)
    p.add_argument("--image-size", type=int, default=224 if gpu else 64)
    p.add_argument("--samples", type=int, default=64000 if gpu else 128, help="samples an epoch")
    p.add_argument("--pool", type=int, default=1024 if gpu else 32, help="distinct images in memory")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--workers", type=int, default=4 if gpu else 0)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--data-parallel", action="store_true", help="wrap the model in nn.DataParallel")
    return p.parse_args()


class SyntheticImages(torch.utils.data.Dataset):
    """``samples`` labelled images drawn from ``pool`` distinct ones (uint8, CHW)."""

    def __init__(self, samples, pool, size):
        self.images = torch.randint(0, 256, (pool, 3, size, size), dtype=torch.uint8)
        self.labels = torch.randint(0, 1000, (samples,))

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.images[i % len(self.images)], self.labels[i]


def main():
    args = parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    dataset = SyntheticImages(args.samples, args.pool, args.image_size)
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size,
                                         shuffle=True, drop_last=True, num_workers=args.workers,
                                         pin_memory=device.type == "cuda")
    model = getattr(torchvision.models, args.arch)(num_classes=1000)
    if args.data_parallel:
        model = nn.DataParallel(model)
    model = model.to(device)
    mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1) * 255
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    step, t0 = 0, time.perf_counter()
    for epoch in range(args.epochs):
        for x, y in loader:
            x = (x.to(device, non_blocking=True).float() - mean) / std
            y = y.to(device, non_blocking=True)
            loss = criterion(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if step % 20 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.3f}", flush=True)
    print(f"done: {step} steps, {step * args.batch_size / (time.perf_counter() - t0):.1f} samples/s", flush=True)


if __name__ == "__main__":
    main()
