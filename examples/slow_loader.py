"""An input-bound training loop: a tiny model fed by a Dataset whose __getitem__ is slow.

Each sample costs a short sleep (standing in for I/O: a network read, a disk seek) plus some
numpy work (standing in for decoding/augmentation). With the default num_workers=0 the
training loop waits on the loader almost all the time, even on a CPU; `--workers N` spreads
the loading over N processes, and since most of each sample's cost is waiting, it gets
measurably faster even on a 2-core machine. The last line reports samples/s over the steps
after the first few (worker start-up excluded).

    python3 examples/slow_loader.py                 # num_workers=0: data-bound
    python3 examples/slow_loader.py --workers 4     # faster
"""

import argparse
import math
import random
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

NUM_CLASSES = 10


class SlowDataset(torch.utils.data.Dataset):
    """Synthetic 3xSxS images; every __getitem__ sleeps and does some numpy work on the CPU."""

    def __init__(self, n, image_size, sleep_s, seed):
        self.n = n
        self.image_size = image_size
        self.sleep_s = sleep_s
        self.seed = seed
        rng = np.random.default_rng(seed)
        self.labels = rng.integers(0, NUM_CLASSES, size=n)
        self.class_means = rng.uniform(-1, 1, size=(NUM_CLASSES, 3, 1, 1)).astype(np.float32)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.sleep_s)  # "I/O"
        rng = np.random.default_rng([self.seed, i])
        label = int(self.labels[i])
        s = self.image_size
        # "decode + augment": noise around a class-dependent colour, a blur, a random flip
        img = rng.standard_normal((3, s, s), dtype=np.float32) + self.class_means[label]
        img = (img + np.roll(img, 1, axis=1) + np.roll(img, 1, axis=2)) / 3.0
        if rng.random() < 0.5:
            img = img[:, :, ::-1]
        img = (img - img.mean()) / (img.std() + 1e-6) + self.class_means[label]
        return torch.from_numpy(np.ascontiguousarray(img)), label


class TinyNet(nn.Module):
    def __init__(self, image_size):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.fc = nn.Linear(8 * ((image_size + 1) // 2) ** 2, NUM_CLASSES)

    def forward(self, x):
        return self.fc(torch.flatten(F.relu(self.conv(x)), 1))


def parse_args(argv=None):
    default_device = "cuda" if torch.cuda.is_available() else "cpu"
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=default_device)
    p.add_argument("--batch-size", type=int, default=None, help="default: 256 on cuda, 32 on cpu")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--steps", type=int, default=None,
                   help="stop after this many optimizer steps; default: 90 on cuda, 40 on cpu")
    p.add_argument("--workers", type=int, default=0, help="DataLoader num_workers (default 0)")
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--sleep-ms", type=float, default=5.0, help="sleep per sample in __getitem__")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--warmup-steps", type=int, default=5,
                   help="steps left out of the final samples/s (worker start-up)")
    p.add_argument("--log-every", type=int, default=10, help="print the loss every N steps")
    p.add_argument("--save", default=None, metavar="PATH", help="save a checkpoint here at the end")
    args = p.parse_args(argv)
    on_gpu = args.device.startswith("cuda")
    if args.batch_size is None:
        args.batch_size = 256 if on_gpu else 32
    if args.steps is None:
        args.steps = 90 if on_gpu else 40
    return args


def main(argv=None):
    args = parse_args(argv)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    on_gpu = device.type == "cuda"

    steps_per_epoch = args.steps if args.epochs <= 1 else math.ceil(args.steps / args.epochs)
    dataset = SlowDataset(steps_per_epoch * args.batch_size, args.image_size, args.sleep_ms / 1000.0, args.seed)
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, shuffle=True, drop_last=True,
                                         num_workers=args.workers)
    model = TinyNet(args.image_size).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    total_steps = args.steps
    epochs = math.ceil(total_steps / len(loader))
    print(f"slow_loader: device={device} batch_size={args.batch_size} workers={args.workers} "
          f"sleep_ms={args.sleep_ms} steps={total_steps}", flush=True)

    step = 0
    t_start = time.perf_counter()
    t_measure = None
    last_loss = float("nan")
    for epoch in range(epochs):
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            step += 1
            if step % args.log_every == 0 or step == total_steps:
                last_loss = loss.item()
                print(f"epoch {epoch + 1} step {step}/{total_steps} loss {last_loss:.4f}", flush=True)
            if step == args.warmup_steps:
                if on_gpu:
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
        t_measure, measured = t_start, step
    else:
        measured = step - args.warmup_steps
    rate = measured * args.batch_size / max(t_end - t_measure, 1e-9)
    print(f"done: {step} steps in {t_end - t_start:.2f} s, {rate:.1f} samples/s "
          f"({(t_end - t_measure) / max(measured, 1) * 1000:.1f} ms/step over {measured} steps), "
          f"final loss {last_loss:.4f}", flush=True)
    if args.save:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, args.save)
        print(f"saved checkpoint to {args.save}", flush=True)


if __name__ == "__main__":
    main()
