#!/usr/bin/env python3
"""scripts/torch_ref.py — PyTorch's CPU training throughput on the workloads of
`build/train_resnet --benchmark 1`, the yardstick scripts/bench_vs_torch.sh
runs beside ember, alternating (a benchmark script; ember never needs Python).

    python3 scripts/torch_ref.py throughput [--model resnet20] [--batch 128] [--size 28]
                                            [--steps 20] [--warmup 3] [--threads 2]
                                            [--autocast none|bf16] [--profile N]

What one run does, and how it lines up with ember's benchmark:
  model     resnet<6n+2> (resnet20, resnet56, ...): the CIFAR-style ResNet of
            net/resnet.cpp with torchvision's names: conv1 3x3/1 to 16
            channels + bn1 + relu, layer1..layer3 of n BasicBlocks (16, 32,
            64 channels; the first block of layer2 and layer3 has stride 2
            and a 1x1 conv + BN downsample), global average pool, fc;
            resnet18: torchvision's, with the 3x3 stride-1 stem and no max
            pool ember builds for small images; resnet50_224: torchvision's
            resnet50 as it is (224x224 inputs).
  input     --size x --size images, 1 channel (3 for resnet50_224), random
            normal values, and random labels of 10 classes, made once, as
            ember's --benchmark 1 uses one synthetic batch (it gives ResNet-50
            at 224 1000 classes: the fc is about 0.1% of that step).
  step      SGD, lr 0.1, momentum 0.9, weight decay 5e-4; zero the
            gradients, forward, cross entropy, backward, step.
  timing    --warmup untimed steps, then --steps timed back to back; the
            rate is steps x batch / seconds over all of them (ember prints
            the median of its --disp-batches intervals).
  threads   --threads (2: the cores of this project's machines) intra-op
            threads; ember takes every core unless --threads says otherwise.
  autocast  bf16: forward and loss under torch.autocast("cpu", bfloat16):
            convolutions and matrix products in bf16 (oneDNN's bf16 kernels
            where the CPU has AVX512-BF16 or AMX), f32 weights and optimizer,
            PyTorch's CPU mixed-precision recipe; the yardstick of
            `train_resnet --precision bf16` (scripts/torch_ref_bf16.py).

It prints one line, which bench_vs_torch.sh reads ("train img/s="):
    torch 1.13.1 resnet20 batch=128 size=28 threads=2 fp32 train img/s=571.3

PyTorch comes from Debian (python3-torch, python3-torchvision: `make
torch-deps`); without it the script says so in one line and exits 1.
"""
import argparse
import contextlib
import sys
import time

INSTALL = "apt-get install python3-torch python3-torchvision (or: make torch-deps)"


def need(module):
    """Imports a module of PyTorch, or exits with one line naming what to install."""
    try:
        return __import__(module)
    except ImportError:
        sys.exit(f"torch_ref.py: Python module '{module}' is missing: {INSTALL}")


def cifar_resnet(torch, depth, in_channels, classes):
    """ResNet-<depth> (depth = 6n + 2) as net/resnet.cpp builds it, torchvision's names."""
    nn, F = torch.nn, torch.nn.functional
    if depth < 8 or (depth - 2) % 6:
        sys.exit(f"torch_ref.py: resnet{depth}: CIFAR-style depths are 6n+2 (20, 32, 44, 56, 110)")
    blocks = (depth - 2) // 6

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            out = F.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return F.relu(out + (x if self.downsample is None else self.downsample(x)))

    class CifarResNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(in_channels, 16, 3, 1, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(16)
            cin, stages = 16, []
            for stage, width in enumerate((16, 32, 64)):
                layer = []
                for b in range(blocks):
                    layer.append(BasicBlock(cin, width, 2 if stage > 0 and b == 0 else 1))
                    cin = width
                stages.append(nn.Sequential(*layer))
            self.layer1, self.layer2, self.layer3 = stages
            self.fc = nn.Linear(64, classes)

        def forward(self, x):
            x = F.relu(self.bn1(self.conv1(x)))
            x = self.layer3(self.layer2(self.layer1(x)))
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

    return CifarResNet()


def make(torch, model, in_channels, classes=10):
    """The model named on the command line."""
    if model == "resnet18":
        tv = need("torchvision")
        m = tv.models.resnet18(num_classes=classes)
        m.conv1 = torch.nn.Conv2d(in_channels, 64, 3, 1, 1, bias=False)  # ember's stem for small images
        m.maxpool = torch.nn.Identity()
        return m
    if model == "resnet50_224":
        tv = need("torchvision")
        return tv.models.resnet50(num_classes=classes)
    if model.startswith("resnet") and model[6:].isdigit():
        return cifar_resnet(torch, int(model[6:]), in_channels, classes)
    sys.exit(f"torch_ref.py: unknown --model {model} (resnet20 or another 6n+2 depth, resnet18, resnet50_224)")


def throughput(args):
    torch = need("torch")
    F = torch.nn.functional
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    in_channels = 3 if args.model == "resnet50_224" else 1
    model = make(torch, args.model, in_channels)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    x = torch.randn(args.batch, in_channels, args.size, args.size)
    y = torch.randint(0, 10, (args.batch,))
    if args.autocast == "bf16":
        autocast = lambda: torch.autocast("cpu", dtype=torch.bfloat16)
    else:
        autocast = contextlib.nullcontext

    def step():
        opt.zero_grad(set_to_none=True)
        with autocast():
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    for _ in range(args.warmup):
        step()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    seconds = time.perf_counter() - start
    precision = "bf16-autocast" if args.autocast == "bf16" else "fp32"
    print(f"torch {torch.__version__} {args.model} batch={args.batch} size={args.size} threads={args.threads} "
          f"{precision} train img/s={args.steps * args.batch / seconds:.1f}", flush=True)
    if args.profile > 0:  # where the time goes, per operator and input shape (on stderr)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
            for _ in range(args.profile):
                step()
        table = prof.key_averages(group_by_input_shape=True).table(sort_by="self_cpu_time_total", row_limit=40)
        print(f"profile of {args.profile} steps:\n{table}", file=sys.stderr, flush=True)


def parse_args(argv, autocast="none"):
    p = argparse.ArgumentParser(
        prog="torch_ref.py",
        description="PyTorch's CPU training throughput on ember's benchmark workloads "
                    "(scripts/bench_vs_torch.sh runs it beside build/train_resnet --benchmark 1).")
    p.add_argument("what", choices=["throughput"], help="what to measure")
    p.add_argument("--model", default="resnet20", help="resnet20 (any 6n+2 depth), resnet18 or resnet50_224")
    p.add_argument("--batch", type=int, default=128, help="images per step")
    p.add_argument("--size", type=int, default=28, help="image side in pixels")
    p.add_argument("--steps", type=int, default=20, help="timed steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    p.add_argument("--threads", type=int, default=2, help="PyTorch's intra-op threads")
    p.add_argument("--profile", type=int, default=0,
                   help="then N more steps under torch.profiler: operators by self CPU time and shape, on stderr")
    p.add_argument("--autocast", choices=["none", "bf16"], default=autocast,
                   help="bf16: forward and loss under CPU bf16 autocast")
    a = p.parse_args(argv)
    for name in ("batch", "size", "steps", "threads"):
        if getattr(a, name) < 1:
            p.error(f"--{name} must be at least 1")
    if a.warmup < 0:
        p.error("--warmup must be at least 0")
    return a


def main(argv=None, autocast="none"):
    throughput(parse_args(sys.argv[1:] if argv is None else argv, autocast))


if __name__ == "__main__":
    main()
