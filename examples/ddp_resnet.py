"""ResNet-50 with DistributedDataParallel, one process per GPU, launched by torchrun.

The layout of PyTorch's DDP tutorials: init_process_group from torchrun's environment, the
model on this rank's GPU wrapped in DDP, a DistributedSampler over the dataset. The data is
synthetic (random 224 px images in memory, 1000 classes), so the step is GPU-bound. Without
CUDA it runs on the CPU over gloo, at a small image size.

    torchrun --nproc-per-node 2 examples/ddp_resnet.py
    advisor analyze --nproc-per-node 2 examples/ddp_resnet.py
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torchvision
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def parse_args():
    gpu = torch.cuda.is_available()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", default="resnet50" if gpu else "resnet18")
    p.add_argument("--batch-size", type=int, default=128 if gpu else 8, help="per process")
    p.add_argument("--image-size", type=int, default=224 if gpu else 64)
    p.add_argument("--samples", type=int, default=8192 if gpu else 256)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--lr", type=float, default=0.1)
    return p.parse_args()


def main():
    args = parse_args()
    gpu = torch.cuda.is_available()
    dist.init_process_group("nccl" if gpu else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local) if gpu else torch.device("cpu")
    if gpu:
        torch.cuda.set_device(device)
    torch.manual_seed(0)
    images = torch.randn(args.samples, 3, args.image_size, args.image_size)
    labels = torch.randint(0, 1000, (args.samples,))
    dataset = TensorDataset(images, labels)
    sampler = DistributedSampler(dataset, shuffle=True)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, drop_last=True,
                        num_workers=2, pin_memory=gpu)
    model = DDP(getattr(torchvision.models, args.arch)(num_classes=1000).to(device),
                device_ids=[local] if gpu else None)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    step, t0 = 0, time.perf_counter()
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = criterion(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if rank == 0 and step % 20 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.3f}", flush=True)
    if rank == 0:
        rate = step * args.batch_size * world / (time.perf_counter() - t0)
        print(f"done: {step} steps, {rate:.1f} samples/s over {world} processes", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
