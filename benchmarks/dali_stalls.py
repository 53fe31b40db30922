"""Per-step times of the dali fix's loader feeding a bf16 channels_last ResNet-18, to find the
long single steps seen in trials: each variant prints its median and worst steps, and the
Python garbage collector's pauses (gc.callbacks) beside them.

    python3 benchmarks/dali_stalls.py DATA_DIR [--steps 120] [--hold S] [--depth N] [--threads N] [--no-gc]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time

import torch
import torchvision
from torchvision import datasets, transforms as T

from advisor.dali.plan import translation
from advisor.dali.source import loader_source

p = argparse.ArgumentParser()
p.add_argument("data")
p.add_argument("--steps", type=int, default=120)
p.add_argument("--hold", type=float, default=0.0, help="sleep this long after step 3 (a held trial)")
p.add_argument("--depth", type=int, default=2, help="DALI prefetch_queue_depth")
p.add_argument("--threads", type=int, default=8)
p.add_argument("--no-gc", action="store_true")
args = p.parse_args()

tf = T.Compose([T.RandomResizedCrop(224, scale=(0.35, 1.0)), T.RandomHorizontalFlip(), T.ToTensor(),
                T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
ds = datasets.ImageFolder(args.data, transform=tf)
loader = torch.utils.data.DataLoader(ds, batch_size=256, shuffle=True, drop_last=True)
files, tr = translation(loader)
ns: dict = {}
exec(compile(loader_source(tr, files), "<dali>", "exec"), ns)  # noqa: S102
cls = ns["_DaliLoader"]


class Variant(cls):
    def __init__(self, loader):  # the fix's __init__ with this variant's threads and depth
        import os

        from nvidia.dali import pipeline_def
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

        pairs = [(os.path.abspath(p), int(y)) for p, y in loader.dataset.samples]
        pairs = [pairs[i] for i in torch.randperm(len(pairs)).tolist()]
        self.batch_size, self.drop_last, self.n = 256, True, len(pairs)
        pipe = pipeline_def(self.pipeline)([p for p, _ in pairs], [y for _, y in pairs], True, True,
                                           batch_size=256, num_threads=args.threads, device_id=0, seed=1,
                                           prefetch_queue_depth=args.depth)
        self.batches = DALIGenericIterator(pipe, ["images", "labels"], reader_name="Reader", auto_reset=True,
                                           last_batch_policy=LastBatchPolicy.DROP)


pauses: list[tuple[int, float]] = []
t_gc = [0.0]


def on_gc(phase, info):
    if phase == "start":
        t_gc[0] = time.perf_counter()
    elif info.get("generation") == 2:
        pauses.append((step, (time.perf_counter() - t_gc[0]) * 1e3))


gc.callbacks.append(on_gc)
if args.no_gc:
    gc.disable()
model = torchvision.models.resnet18(num_classes=10).cuda().to(memory_format=torch.channels_last)
opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
made = Variant(loader)
times, step = [], 0
t0 = time.perf_counter()
while step < args.steps:
    for x, y in made:
        with torch.autocast("cuda", torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x.contiguous(memory_format=torch.channels_last)), y.cuda())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        t = time.perf_counter()
        times.append((t - t0) * 1e3)
        t0 = t
        step += 1
        if step == 3 and args.hold:
            time.sleep(args.hold)
            t0 = time.perf_counter()
        if step >= args.steps:
            break
w = times[5:]
worst = sorted(range(len(w)), key=lambda i: -w[i])[:4]
print(f"hold={args.hold} depth={args.depth} threads={args.threads} gc={'off' if args.no_gc else 'on'}: "
      f"median {statistics.median(w):.1f} ms, mean {statistics.mean(w):.1f} ms, "
      f"worst {[(i + 6, round(w[i])) for i in worst]}, gen2 gc pauses {[(s, round(ms)) for s, ms in pauses]}", flush=True)
