"""MNIST as torchvision serves it, at a large batch: 28x28 uint8 images turned into PIL images and
through ToTensor and Normalize in 4 DataLoader workers, batch 2048, the pytorch/examples CNN.

torchvision's MNIST dataset returns ``Image.fromarray(img)`` through the transform; here the
60,000 images are synthetic uint8 digits made with a fixed seed (no download). The step is the
data pipeline's: ~2048 PIL conversions a batch for a CNN that trains it in a few ms.

    python3 examples/mnist_pil_transforms.py --epochs 2
"""

import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision.transforms as T
from PIL import Image


class SyntheticMNIST(torch.utils.data.Dataset):
    """torchvision.datasets.MNIST's __getitem__ over synthetic uint8 digits."""

    def __init__(self, n, transform, seed=0):
        rng = np.random.default_rng(seed)
        strokes = (rng.random((10, 7, 7)) > 0.6).repeat(3, 1).repeat(3, 2)   # one 21x21 pattern a class
        self.targets = rng.integers(0, 10, n)
        self.data = np.zeros((n, 28, 28), np.uint8)
        for i, (dy, dx) in enumerate(rng.integers(0, 8, (n, 2))):
            self.data[i, dy:dy + 21, dx:dx + 21] = strokes[self.targets[i]] * 255
        self.transform = transform

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        img = Image.fromarray(self.data[index], mode="L")
        return self.transform(img), int(self.targets[index])


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
        x = F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2)
        x = torch.flatten(self.dropout1(x), 1)
        return F.log_softmax(self.fc2(self.dropout2(F.relu(self.fc1(x)))), dim=1)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch-size", type=int, default=2048)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--num-samples", type=int, default=60000)
    args = p.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    transform = T.Compose([T.ToTensor(), T.Normalize((0.1307,), (0.3081,))])
    loader = torch.utils.data.DataLoader(SyntheticMNIST(args.num_samples, transform), batch_size=args.batch_size,
                                         shuffle=True, num_workers=args.workers, pin_memory=device.type == "cuda")
    model = Net().to(device)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
    for epoch in range(args.epochs):
        for data, target in loader:
            data, target = data.to(device), target.to(device)
            optimizer.zero_grad()
            loss = F.nll_loss(model(data), target)
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch}: loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
