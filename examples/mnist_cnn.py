"""The PyTorch MNIST example's CNN (conv-conv-dropout-fc-fc, Adadelta + StepLR) on synthetic digits.

After https://github.com/pytorch/examples/tree/main/mnist, with the dataset replaced by synthetic
28x28 grayscale "digits" made locally with a fixed seed (no downloads): each class is a fixed
random stroke pattern, randomly shifted and noised, normalized with MNIST's mean/std.

    python3 examples/mnist_cnn.py
    python3 examples/mnist_cnn.py --steps 20 --batch-size 32 --device cpu
"""

import argparse
import math
import random
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import StepLR

NUM_CLASSES = 10
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.dropout2(x)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


def make_synthetic_digits(n, seed, template_seed=1234):
    """(n, 1, 28, 28) float images normalized like MNIST, and int64 labels.

    template_seed fixes the classes (same for train and test); seed draws the samples."""
    g = torch.Generator().manual_seed(template_seed)
    # one 7x7 binary stroke pattern per class, upsampled to 20x20 and placed in a 28x28 canvas
    templates = (torch.rand(NUM_CLASSES, 1, 7, 7, generator=g) > 0.6).float()
    templates = F.interpolate(templates, size=(20, 20), mode="nearest")
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, NUM_CLASSES, (n,), generator=g)
    images = torch.zeros(n, 1, 28, 28)
    shifts = torch.randint(0, 9, (n, 2), generator=g)
    for i in range(n):
        dy, dx = int(shifts[i, 0]), int(shifts[i, 1])
        images[i, :, dy:dy + 20, dx:dx + 20] = templates[labels[i]]
    images = (images * 0.8 + torch.rand(n, 1, 28, 28, generator=g) * 0.4).clamp_(0, 1)
    images = (images - MNIST_MEAN) / MNIST_STD
    return images, labels


def parse_args(argv=None):
    default_device = "cuda" if torch.cuda.is_available() else "cpu"
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=default_device)
    p.add_argument("--batch-size", type=int, default=None, help="default: 512 on cuda, 64 on cpu")
    p.add_argument("--test-batch-size", type=int, default=1000)
    p.add_argument("--epochs", type=int, default=None, help="default: 60 on cuda (the example has 14; more for ~60 s), 1 on cpu")
    p.add_argument("--steps", type=int, default=None, help="stop after this many optimizer steps in total")
    p.add_argument("--num-samples", type=int, default=None,
                   help="training images; default: 60000 on cuda, 40 batches on cpu")
    p.add_argument("--lr", type=float, default=1.0, help="Adadelta learning rate (default: 1.0)")
    p.add_argument("--gamma", type=float, default=0.7, help="StepLR gamma (default: 0.7)")
    p.add_argument("--workers", type=int, default=None, help="DataLoader workers; default 1 on cuda, 0 on cpu")
    p.add_argument("--no-test", action="store_true", help="skip the test pass after each epoch")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--warmup-steps", type=int, default=5,
                   help="steps left out of the final samples/s (start-up, cudnn autotuning)")
    p.add_argument("--log-every", type=int, default=10, help="print the loss every N steps")
    p.add_argument("--save", default=None, metavar="PATH", help="save the model's state_dict here at the end")
    args = p.parse_args(argv)
    on_gpu = args.device.startswith("cuda")
    if args.batch_size is None:
        args.batch_size = 512 if on_gpu else 64
    if args.epochs is None:
        args.epochs = 60 if on_gpu else 1
    if args.num_samples is None:
        args.num_samples = 60000 if on_gpu else 40 * args.batch_size
    if args.workers is None:
        args.workers = 1 if on_gpu else 0
    return args


def test(model, device, loader):
    model.eval()
    test_loss, correct = 0.0, 0
    with torch.no_grad():
        for data, target in loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction="sum").item()
            correct += (output.argmax(dim=1) == target).sum().item()
    n = len(loader.dataset)
    print(f"test: average loss {test_loss / n:.4f}, accuracy {correct}/{n} ({100.0 * correct / n:.0f}%)",
          flush=True)


def main(argv=None):
    args = parse_args(argv)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    on_gpu = device.type == "cuda"

    train_x, train_y = make_synthetic_digits(args.num_samples, args.seed)
    test_x, test_y = make_synthetic_digits(max(200, args.num_samples // 6), args.seed + 1000)
    loader_kwargs = {"num_workers": args.workers, "pin_memory": on_gpu}
    train_loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(train_x, train_y),
                                               batch_size=args.batch_size, shuffle=True, **loader_kwargs)
    test_loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(test_x, test_y),
                                              batch_size=args.test_batch_size, **loader_kwargs)

    model = Net().to(device)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)

    total_steps = args.epochs * len(train_loader)
    if args.steps is not None:
        total_steps = args.steps
    epochs = math.ceil(total_steps / max(1, len(train_loader)))
    print(f"mnist_cnn: device={device} batch_size={args.batch_size} samples={len(train_x)} "
          f"steps={total_steps}", flush=True)

    step = 0
    t0 = time.perf_counter()
    t_measure = None
    last_loss = float("nan")
    for epoch in range(1, epochs + 1):
        model.train()
        for data, target in train_loader:
            data, target = data.to(device), target.to(device)
            optimizer.zero_grad()
            output = model(data)
            loss = F.nll_loss(output, target)
            loss.backward()
            optimizer.step()
            step += 1
            if step % args.log_every == 0 or step == total_steps:
                last_loss = loss.item()
                print(f"epoch {epoch} step {step}/{total_steps} loss {last_loss:.4f}", flush=True)
            if step == args.warmup_steps:
                if device.type == "cuda":
                    torch.cuda.synchronize()
                t_measure = time.perf_counter()
            if step >= total_steps:
                break
        if on_gpu:
            torch.cuda.synchronize()
        if not args.no_test and step % len(train_loader) == 0:  # full epochs only
            test(model, device, test_loader)
        scheduler.step()
        if step >= total_steps:
            break
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
        torch.save(model.state_dict(), args.save)
        print(f"saved model to {args.save}", flush=True)


if __name__ == "__main__":
    main()
