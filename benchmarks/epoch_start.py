"""Epoch-start latency of a preloaded, shuffled DataLoader: the time of the first next() after
iter(), with the next epoch's permutation made ahead in the background (preload.SPECULATE)
and without (the randperm made at the epoch start, as before).

    python3 benchmarks/epoch_start.py [--device cpu|cuda] [--n 50000] [--batch 2048] [--threads N]

A sleep stands in for each training step (the time the background randperm has). Three
runs, each its own DataLoader from the same seed: "made at start" (speculation off), "made
ahead" (on, nothing drawn between epochs: every guess right), "guess missed" (on, the script
draws a CPU random number between epochs: every guess wrong, the randperm made at the start
as before). The batches of the three runs are checked equal, epoch by epoch.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from advisor.interventions import preload  # noqa: E402


class Features(torch.utils.data.Dataset):
    def __init__(self, n: int, width: int):
        self.x = torch.randn(n, width, generator=torch.Generator().manual_seed(0))

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], i % 10


def run(args, speculate: bool, draw_between: bool):
    preload.SPECULATE = speculate
    torch.manual_seed(0)
    loader = torch.utils.data.DataLoader(Features(args.n, args.width), batch_size=args.batch, shuffle=True,
                                         drop_last=True)
    assert isinstance(loader.dataset, preload.Preloaded), "not preloaded"
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    firsts, firsts_labels = [], []
    for _epoch in range(args.epochs):
        it = iter(loader)
        t0 = time.perf_counter()
        x, y = next(it)
        firsts.append(time.perf_counter() - t0)
        firsts_labels.append(y.cpu())
        time.sleep(args.step_ms / 1e3)
        for _x, _y in it:
            time.sleep(args.step_ms / 1e3)  # the training step
        sync()
        if draw_between:
            torch.rand(1)
    spec = loader._preload_speculation
    return firsts, firsts_labels, (spec.hits, spec.misses) if spec is not None else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--n", type=int, default=50_000)
    ap.add_argument("--batch", type=int, default=2048)
    ap.add_argument("--width", type=int, default=16, help="floats per sample")
    ap.add_argument("--epochs", type=int, default=12)
    ap.add_argument("--step-ms", type=float, default=5.0)
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: as found)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    preload.apply({"device": args.device})

    g = torch.Generator().manual_seed(1)
    times = []
    for _ in range(20):
        t0 = time.perf_counter()
        torch.randperm(args.n, generator=g)
        times.append(time.perf_counter() - t0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {args.device}, n={args.n}, "
          f"batch {args.batch}, {args.epochs} epochs of {args.n // args.batch} steps of {args.step_ms} ms (a sleep)")
    print(f"randperm({args.n}) alone: median {statistics.median(times) * 1e3:.2f} ms")
    print("first next() after iter(), epochs 2.. (epoch 1 has nothing to guess from):")
    base = None
    for name, speculate, draw in (("made at start", False, False), ("made ahead", True, False),
                                  ("guess missed", True, True)):
        firsts, labels, counts = run(args, speculate, draw)
        if base is None:
            base = labels
        # "guess missed" draws between epochs, so its shuffle differs from epoch 2 on
        same = all(torch.equal(a, b) for a, b in zip(labels, base)) if not draw else torch.equal(labels[0], base[0])
        later = [t * 1e3 for t in firsts[1:]]
        print(f"  {name:14s} median {statistics.median(later):6.3f} ms  min {min(later):6.3f}  max {max(later):6.3f}"
              f"  (epoch 1: {firsts[0] * 1e3:.3f} ms)  hits/misses {counts}  same batches: {same}")


if __name__ == "__main__":
    main()
