import io

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

N_CLASSES = {'flowers': 102, 'birds': 200}
WORDS = ['petals', 'pink', 'yellow', 'white', 'stamen', 'round', 'long', 'thin', 'purple', 'center']


def _synthetic_jpeg(rng, size=256):
    """A JPEG-encoded RGB image of a few soft colored blobs (the HDF5 files hold JPEG bytes)."""
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
    img = np.zeros((size, size, 3), np.float32) + rng.uniform(0, 80, 3)
    for _ in range(rng.integers(3, 7)):
        cy, cx, r = rng.uniform(0.2, 0.8), rng.uniform(0.2, 0.8), rng.uniform(0.05, 0.25)
        blob = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * r * r))
        img += blob[..., None] * rng.uniform(40, 200, 3)
    buf = io.BytesIO()
    Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(buf, format='JPEG', quality=90)
    return buf.getvalue()


class Text2ImageDataset(Dataset):
    """Upstream reads split -> example -> (img JPEG bytes, embeddings 1024, class, txt) from an
    HDF5 file. This one holds the same fields, synthetic: a pool of JPEG-encoded images, a
    1024-d embedding and a caption per example; each item decodes and resizes its images to
    64 x 64 as upstream does."""

    def __init__(self, datasetFile, transform=None, split=0, num_samples=8189, dataset='flowers'):
        self.datasetFile = datasetFile
        self.transform = transform
        self.split = 'train' if split == 0 else 'valid' if split == 1 else 'test'
        self.num_samples = num_samples
        self.n_classes = N_CLASSES.get(dataset, 102)
        rng = np.random.default_rng(split)
        self.images = [_synthetic_jpeg(rng) for _ in range(64)]
        self.classes = np.arange(num_samples) % self.n_classes

    def __len__(self):
        return self.num_samples

    def _example(self, idx):
        rng = np.random.default_rng(1000003 * idx + 17)
        return {'img': self.images[idx % len(self.images)],
                'embeddings': rng.standard_normal(1024).astype(np.float32),
                'class': int(self.classes[idx]),
                'txt': 'this flower has ' + ' '.join(rng.choice(WORDS, 6))}

    def __getitem__(self, idx):
        example = self._example(idx)

        right_image = example['img']
        right_embed = np.array(example['embeddings'], dtype=float)
        wrong_image = self.find_wrong_image(example['class'])
        inter_embed = np.array(self.find_inter_embed())

        right_image = Image.open(io.BytesIO(right_image)).resize((64, 64))
        wrong_image = Image.open(io.BytesIO(wrong_image)).resize((64, 64))

        right_image = self.validate_image(right_image)
        wrong_image = self.validate_image(wrong_image)

        txt = np.array(example['txt']).astype(str)

        sample = {
            'right_images': torch.FloatTensor(right_image),
            'right_embed': torch.FloatTensor(right_embed),
            'wrong_images': torch.FloatTensor(wrong_image),
            'inter_embed': torch.FloatTensor(inter_embed),
            'txt': str(txt)
        }

        sample['right_images'] = sample['right_images'].sub_(127.5).div_(127.5)
        sample['wrong_images'] = sample['wrong_images'].sub_(127.5).div_(127.5)

        return sample

    def find_wrong_image(self, category):
        # an image of another class, drawn at random (upstream: np.random over the split's keys)
        idx = np.random.randint(self.num_samples)
        if self.classes[idx] != category:
            return self._example(idx)['img']
        return self.find_wrong_image(category)

    def find_inter_embed(self):
        idx = np.random.randint(self.num_samples)
        return self._example(idx)['embeddings']

    def validate_image(self, img):
        img = np.array(img, dtype=float)
        if len(img.shape) < 3:
            rgb = np.empty((64, 64, 3), dtype=np.float32)
            rgb[:, :, 0] = img
            rgb[:, :, 1] = img
            rgb[:, :, 2] = img
            img = rgb

        return img.transpose(2, 0, 1)
