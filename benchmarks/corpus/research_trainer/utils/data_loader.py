"""Data loading for the field-to-field regression task.

The original pipeline reads 3-channel fields from HDF5 files, one sample per time step, and
trains the network to predict the field one step ahead. For this corpus copy the fields are
synthesized per sample (a seeded random field plus a few smooth modes), so that nothing has to be
downloaded; the per-sample CPU work (build, normalize, random crop, flip) is of the same kind.
"""
import logging

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


def get_data_loader(params, distributed, train):
    dataset = SyntheticFieldDataset(params, train)

    sampler = DistributedSampler(dataset, shuffle=train) if distributed else None

    dataloader = DataLoader(dataset,
                            batch_size=int(params.batch_size),
                            num_workers=params.num_data_workers,
                            shuffle=(sampler is None),
                            sampler=sampler,
                            drop_last=True,
                            pin_memory=torch.cuda.is_available())

    if train:
        return dataloader, dataset, sampler
    else:
        return dataloader, dataset


class SyntheticFieldDataset(Dataset):
    def __init__(self, params, train):
        self.params = params
        self.train = train
        self.n_channels = int(params.n_channels)
        self.img_size = int(params.img_size)          # crop fed to the network
        self.full_size = int(params.full_size)        # size of a stored field
        self.n_samples = int(params.n_train if train else params.n_valid)
        self.dt = int(params.dt)
        self.seed_offset = 0 if train else 1_000_003
        self.add_noise = bool(params.add_noise) and train
        self.noise_std = float(params.noise_std)
        # per-channel normalization constants, as the original reads them from global_means.npy
        self.means = np.zeros((self.n_channels, 1, 1), dtype=np.float32)
        self.stds = np.full((self.n_channels, 1, 1), 1.5, dtype=np.float32)

        yy, xx = np.meshgrid(np.linspace(0, 2 * np.pi, self.full_size, dtype=np.float32),
                             np.linspace(0, 2 * np.pi, self.full_size, dtype=np.float32),
                             indexing='ij')
        self.modes = np.stack([np.sin(xx + yy), np.cos(2 * xx - yy), np.sin(3 * yy)]).astype(np.float32)

        logging.info("Number of samples in %s dataset: %d (fields %dx%dx%d, crops %dx%d)",
                     "training" if train else "validation", self.n_samples, self.n_channels,
                     self.full_size, self.full_size, self.img_size, self.img_size)

    def __len__(self):
        return self.n_samples

    def _field(self, idx):
        rng = np.random.default_rng(self.seed_offset + idx)
        amp = rng.standard_normal((self.n_channels, 3)).astype(np.float32)
        field = np.einsum('cm,mhw->chw', amp, self.modes)
        field += 0.5 * rng.standard_normal(field.shape, dtype=np.float32)
        return field

    def _step(self, field):
        # the "physics": advect by dt pixels and mix in the channel mean
        nxt = np.roll(field, shift=self.dt, axis=-1)
        return 0.7 * nxt + 0.3 * field.mean(axis=0, keepdims=True)

    def __getitem__(self, idx):
        inp = self._field(idx)
        tar = self._step(inp)

        inp = (inp - self.means) / self.stds
        tar = (tar - self.means) / self.stds

        if self.train:
            rng = np.random.default_rng()
            y0 = rng.integers(0, self.full_size - self.img_size + 1)
            x0 = rng.integers(0, self.full_size - self.img_size + 1)
            flip = rng.random() < 0.5
        else:
            y0 = x0 = (self.full_size - self.img_size) // 2
            flip = False

        inp = inp[:, y0:y0 + self.img_size, x0:x0 + self.img_size]
        tar = tar[:, y0:y0 + self.img_size, x0:x0 + self.img_size]
        if flip:
            inp = inp[:, ::-1]
            tar = tar[:, ::-1]

        if self.add_noise:
            inp = inp + self.noise_std * np.random.standard_normal(inp.shape).astype(np.float32)

        return torch.as_tensor(np.ascontiguousarray(inp)), torch.as_tensor(np.ascontiguousarray(tar))
