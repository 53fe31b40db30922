"""The python the dali fix runs, and writes into the user's script: one class, ``_DaliLoader``.

``loader_source(translation, files)`` returns it as text. The class holds the pipeline
(torchvision's transforms as DALI operators, advisor.dali.transforms) and stands in for a
DataLoader: ``_DaliLoader.replacing(DataLoader(...))`` reads the dataset's files and labels,
its batch size, shuffle and drop_last from the DataLoader the script made, and yields
``[images, labels]`` as the DataLoader's collate would: images CHW on the GPU, labels int64.
A DataLoader it cannot stand in for (a sampler of its own, a collate function) is returned
unchanged. DALI is imported when a loader is made, so the edited script still imports
without it. At run time advisor executes this same text, so the trial measures the code the
patch hands over.
"""

from __future__ import annotations

import textwrap

from .datasets import Files
from .transforms import Translation

CLASS_NAME = "_DaliLoader"

_TEMPLATE = '''
class _DaliLoader:
    """DataLoader(dataset, batch_size, shuffle, drop_last)'s batches made by NVIDIA DALI: the
    dataset's files are decoded and transformed on the GPU, images arrive there as CHW
    {dtype}, labels as int64 (added by advisor's dali fix; pip install nvidia-dali-cuda120,
    or nvidia-dali-cuda130 for a CUDA 13 build of torch). Each epoch is a new shuffle.

{mapping}
    """

    @staticmethod
    def pipeline(files, labels, shuffle, gpu):
        from nvidia.dali import fn, types

        encoded, label = fn.readers.file(files=files, labels=labels, random_shuffle=False,
                                         shuffle_after_epoch=shuffle, pad_last_batch=True, name="Reader")
{body}

    @classmethod
    def replacing(cls, loader):
        """A _DaliLoader for `loader`; `loader` itself where its batches are not the default ones."""
        import torch

        data = torch.utils.data
        if loader.batch_size is None or type(loader.batch_sampler) is not data.BatchSampler \\
                or type(loader.sampler) not in (data.RandomSampler, data.SequentialSampler) \\
                or loader.collate_fn is not data.default_collate \\
                or getattr(loader.sampler, "replacement", False) or getattr(loader.sampler, "_num_samples", None):
            return loader
        return cls(loader)

    def __init__(self, loader):
        import os

        import torch
        from nvidia.dali import pipeline_def
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

        dataset = self.dataset = loader.dataset
        pairs = [(os.path.abspath(path), int(label)) for path, label in {samples}]
        self.batch_size, self.drop_last, self.n = loader.batch_size, loader.drop_last, len(pairs)
        shuffle = isinstance(loader.sampler, torch.utils.data.RandomSampler)
        if shuffle:  # the first epoch's order from torch's generator; the reader reshuffles after each
            pairs = [pairs[i] for i in torch.randperm(len(pairs)).tolist()]
        gpu = torch.cuda.is_available()
        # DALI's CPU threads read the files (and Huffman-decode some on the GPU's behalf): half
        # the cores, up to 8, leave the rest to the training loop
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        pipe = pipeline_def(self.pipeline)(
            [path for path, _ in pairs], [label for _, label in pairs], shuffle, gpu,
            batch_size=self.batch_size, num_threads=max(2, min((cpus or 2) // 2, 8)),
            device_id=torch.cuda.current_device() if gpu else None, seed=torch.initial_seed() % 2**31)
        self.batches = DALIGenericIterator(
            pipe, ["images", "labels"], reader_name="Reader", auto_reset=True,
            last_batch_policy=LastBatchPolicy.DROP if self.drop_last else LastBatchPolicy.PARTIAL)

    def __len__(self):
        return self.n // self.batch_size if self.drop_last else -(-self.n // self.batch_size)

    def __iter__(self):
        for (batch,) in self.batches:
            yield [batch["images"], batch["labels"].view(-1).long()]
'''.strip("\n")


def loader_source(tr: Translation, files: Files) -> str:
    """The class's source text, ending in a newline."""
    width = max((len(a) for a, _ in tr.mapping), default=0)
    mapping = "\n".join(f"    {a.ljust(width)}  ->  {b}" for a, b in tr.mapping)
    body = textwrap.indent("\n".join(tr.lines), " " * 8)
    return _TEMPLATE.format(dtype=tr.dtype, mapping=mapping, body=body, samples=files.samples) + "\n"


def swap(loader_code: str) -> str:
    """The expression that replaces a DataLoader call's code in the script."""
    return f"{CLASS_NAME}.replacing({loader_code})"
