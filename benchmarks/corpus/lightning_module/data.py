"""A CIFAR-10-shaped LightningDataModule on synthetic images.

The images are generated once in setup() and kept as a uint8 NHWC array, as torchvision's CIFAR10
keeps them; __getitem__ turns one into a PIL image and runs the usual CIFAR transforms, so the
per-sample CPU work is that of the real dataset. Each class has its own colour and stripe
pattern under the noise, so the labels can be learned.
"""
import lightning as L
import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms

CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)


def make_images(n, num_classes, seed, size=32):
    rng = np.random.default_rng(seed)
    targets = rng.integers(0, num_classes, size=n)
    palette = rng.integers(40, 216, size=(num_classes, 3))
    yy, xx = np.mgrid[0:size, 0:size]
    angles = np.linspace(0, np.pi, num_classes, endpoint=False)
    patterns = np.stack([np.sin((np.cos(a) * xx + np.sin(a) * yy) * 0.6) for a in angles])  # (C, H, W)
    images = np.empty((n, size, size, 3), dtype=np.uint8)
    chunk = 4096
    for s in range(0, n, chunk):
        t = targets[s:s + chunk]
        img = palette[t][:, None, None, :] + 40.0 * patterns[t][..., None]
        img += rng.normal(0.0, 48.0, size=img.shape)
        images[s:s + chunk] = np.clip(img, 0, 255).astype(np.uint8)
    return images, targets.astype(np.int64)


class SyntheticCIFAR10(Dataset):
    def __init__(self, n, num_classes=10, seed=0, transform=None):
        self.data, self.targets = make_images(n, num_classes, seed)
        self.transform = transform

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        img, target = self.data[index], int(self.targets[index])
        img = Image.fromarray(img)
        if self.transform is not None:
            img = self.transform(img)
        return img, target


class CIFARDataModule(L.LightningDataModule):
    def __init__(self, batch_size=128, num_workers=2, train_size=50000, val_size=10000, num_classes=10):
        super().__init__()
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.train_size = train_size
        self.val_size = val_size
        self.num_classes = num_classes
        self.train_transform = transforms.Compose([
            transforms.RandomCrop(32, padding=4),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize(CIFAR_MEAN, CIFAR_STD),
        ])
        self.test_transform = transforms.Compose([
            transforms.ToTensor(),
            transforms.Normalize(CIFAR_MEAN, CIFAR_STD),
        ])

    def setup(self, stage=None):
        if stage in ("fit", None):
            self.train_ds = SyntheticCIFAR10(self.train_size, self.num_classes, seed=0,
                                             transform=self.train_transform)
            self.val_ds = SyntheticCIFAR10(self.val_size, self.num_classes, seed=1,
                                           transform=self.test_transform)
        if stage in ("test", None):
            self.test_ds = SyntheticCIFAR10(self.val_size, self.num_classes, seed=2,
                                            transform=self.test_transform)

    def train_dataloader(self):
        return DataLoader(self.train_ds, batch_size=self.batch_size, num_workers=self.num_workers, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val_ds, batch_size=self.batch_size, num_workers=self.num_workers)

    def test_dataloader(self):
        return DataLoader(self.test_ds, batch_size=self.batch_size, num_workers=self.num_workers)
