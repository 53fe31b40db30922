import logging

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

# The synthetic stand-in for the tutorial's ERA5 files: 6-hourly snapshots, 1460 a year, of the
# (downsampled) 721 x 1440 grid; train and validation years as the tutorial's split has them.
SAMPLES_PER_YEAR = 1460
GRID = (721, 1440)
N_YEARS = {True: 4, False: 1}
N_MODES = 3


def worker_init(wrk_id):
    np.random.seed(torch.utils.data.get_worker_info().seed % (2**32 - 1))


def get_data_loader(params, files_pattern, distributed, train):
    dataset = ERA5Dataset(params, files_pattern, train)

    if distributed:
        if hasattr(params, 'data_num_shards'):
            # this is for model parallelism
            assert hasattr(params, 'data_shard_id'), 'please set data_num_shards and data_shard_id'
            sampler = DistributedSampler(dataset, shuffle=train, num_replicas=params.data_num_shards,
                                         rank=params.data_shard_id)
        else:
            sampler = DistributedSampler(dataset, shuffle=train)
    else:
        sampler = None

    dataloader = DataLoader(dataset,
                            batch_size=int(params.local_batch_size),
                            num_workers=params.num_data_workers,
                            shuffle=(sampler is None),
                            sampler=sampler,
                            worker_init_fn=worker_init,
                            drop_last=True,
                            pin_memory=torch.cuda.is_available())

    if train:
        return dataloader, dataset, sampler
    else:
        return dataloader, dataset


class ERA5Dataset(Dataset):
    """Input / target pairs of atmospheric fields dt steps apart, normalized per channel.

    Upstream reads them from one HDF5 file per year (``fields``: [samples, channels, lat, lon])
    and normalizes with the means and stds in .npy files. Here each snapshot is computed: per
    channel a few large-scale waves drifting eastward with time, so the field dt steps later is
    predictable from the input, as the weather is. The per-sample cost (two fields made and
    normalized in NumPy) stands in for the two HDF5 reads."""

    def __init__(self, params, location, train):
        self.params = params
        self.location = location
        self.train = train
        self.dt = params.dt
        self.n_in_channels = params.n_in_channels
        self.n_out_channels = params.n_out_channels
        self.normalize = True
        # upstream: np.load(params.global_means_path)[0], np.load(params.global_stds_path)[0]
        ch = np.arange(self.n_in_channels, dtype=np.float32)
        self.means = (10.0 * np.cos(ch)).reshape(-1, 1, 1).astype(np.float32)
        self.stds = (1.0 + 0.5 * (ch % 3)).reshape(-1, 1, 1).astype(np.float32)
        self.limit_nsamples = params.limit_nsamples if train else params.limit_nsamples_val
        self._get_files_stats()

    def _get_files_stats(self):
        self.n_years = N_YEARS[bool(self.train)]
        self.n_samples_per_year = SAMPLES_PER_YEAR
        self.img_shape_x = self.params.img_size[0]
        self.img_shape_y = self.params.img_size[1]
        assert self.img_shape_x <= GRID[0] and self.img_shape_y <= GRID[1], \
            'image shapes are greater than dataset image shapes'

        self.n_samples_total = self.n_years * self.n_samples_per_year
        if self.limit_nsamples is not None:
            self.n_samples_total = min(self.n_samples_total, self.limit_nsamples)
            logging.info("Overriding total number of samples to: {}".format(self.n_samples_total))
        rng = np.random.default_rng(0 if self.train else 1)
        c = self.n_in_channels
        # per channel and mode: wavenumbers, phase, amplitude and drift speed
        self.k_lat = rng.integers(1, 4, (c, N_MODES)).astype(np.float32)
        self.k_lon = rng.integers(1, 6, (c, N_MODES)).astype(np.float32)
        self.phase = rng.uniform(0, 2 * np.pi, (c, N_MODES)).astype(np.float32)
        self.amp = rng.uniform(0.5, 1.5, (c, N_MODES)).astype(np.float32)
        self.speed = rng.uniform(0.05, 0.2, (c, N_MODES)).astype(np.float32)
        self.lat = np.linspace(0, np.pi, GRID[0], dtype=np.float32)[:self.img_shape_x]
        self.lon = np.linspace(0, 2 * np.pi, GRID[1], endpoint=False, dtype=np.float32)[:self.img_shape_y]
        logging.info("Number of samples per year: {}".format(self.n_samples_per_year))
        logging.info("Found data at path {}. Number of examples: {}. Image Shape: {} x {} x {}".format(
            self.location, self.n_samples_total, self.img_shape_x, self.img_shape_y, self.n_in_channels))

    def _field(self, t):
        """All channels of the snapshot at time step t: [channels, lat, lon], float32."""
        out = np.empty((self.n_in_channels, self.img_shape_x, self.img_shape_y), np.float32)
        for c in range(self.n_in_channels):
            acc = np.zeros((self.img_shape_x, self.img_shape_y), np.float32)
            for m in range(N_MODES):
                lon_phase = self.k_lon[c, m] * self.lon + self.phase[c, m] + self.speed[c, m] * t
                acc += self.amp[c, m] * np.outer(np.sin(self.k_lat[c, m] * self.lat), np.cos(lon_phase))
            out[c] = self.means[c] + self.stds[c] * acc
        return out

    def __len__(self):
        return self.n_samples_total

    def _normalize(self, img):
        if self.normalize:
            img -= self.means
            img /= self.stds
        return torch.as_tensor(img)

    def __getitem__(self, global_idx):
        year_idx = int(global_idx / self.n_samples_per_year)  # which year
        local_idx = int(global_idx % self.n_samples_per_year)  # which sample in that year
        step = self.dt  # time step

        # boundary conditions to ensure we don't pull data that is not in a specific year
        local_idx = local_idx % (self.n_samples_per_year - step)
        if local_idx < step:
            local_idx += step

        t = year_idx * self.n_samples_per_year + local_idx
        inp_field = self._field(t)
        tar_field = self._field(t + step)
        inp, tar = self._normalize(inp_field), self._normalize(tar_field)

        return inp, tar
