"""The PyTorch profiler tutorial's script: ResNet-18 on CIFAR-10-sized images resized to 224, a
handful of steps under the script's own torch.profiler, whose TensorBoard trace it writes.

After https://pytorch.org/tutorials/intermediate/tensorboard_profiler_tutorial.html, with
CIFAR-10 replaced by torchvision's FakeData (no download) and ten steps instead of five:

    python3 examples/profiler_tutorial.py            # writes ./log/resnet18/*.pt.trace.json
    advisor analyze examples/profiler_tutorial.py    # the same trace, and advisor's answer
"""

import argparse

import torch
import torch.nn
import torch.optim
import torch.profiler
import torch.utils.data
import torchvision.datasets
import torchvision.models
import torchvision.transforms as T

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("--steps", type=int, default=10)
p.add_argument("--log-dir", default="./log/resnet18")
args = p.parse_args()

transform = T.Compose([T.Resize(224), T.ToTensor(), T.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))])
train_set = torchvision.datasets.FakeData(size=2000, image_size=(3, 32, 32), num_classes=10, transform=transform)
train_loader = torch.utils.data.DataLoader(train_set, batch_size=32, shuffle=True)

device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
model = torchvision.models.resnet18(weights=None).to(device)
criterion = torch.nn.CrossEntropyLoss().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.001, momentum=0.9)
model.train()


def train(data):
    inputs, labels = data[0].to(device=device), data[1].to(device=device)
    outputs = model(inputs)
    loss = criterion(outputs, labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


with torch.profiler.profile(
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=1),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(args.log_dir),
        record_shapes=True,
        profile_memory=True,
        with_stack=True) as prof:
    for step, batch_data in enumerate(train_loader):
        prof.step()  # the profiler's step boundary
        if step >= args.steps:
            break
        train(batch_data)
