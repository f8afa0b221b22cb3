"""PyTorch on the GPU, the reference for ember's GPU training speed (scripts/gpu_check.sh runs it).

Trains on synthetic data, as `train_resnet --benchmark 1 --gpus 0` does, and prints one line per
configuration: the median img/s over --repeats timed windows of --steps steps (after --warmup).
  resnet50 224x224x3, batch 64: fp32 (PyTorch's defaults: TF32 convolutions, fp32 matmul), fp32 with
    TF32 off, fp16 autocast + GradScaler, bf16 autocast, each 16-bit one also channels_last (NHWC);
  resnet20 28x28x1 (CIFAR-style, 16-32-64 channels), batch 128: fp32 — small layers, where per-step
    overheads decide.
Each line also gives the peak device memory (torch.cuda.max_memory_allocated).
usage: python3 scripts/torch_gpu_ref.py [--steps 10] [--warmup 3] [--repeats 3] [--only NAME]
  (--only: the configuration of that exact name, else every one whose name contains it)
"""
import argparse, statistics, time
import torch, torch.nn as nn, torch.nn.functional as F
import torchvision


def block(cin, cout, stride):
    class Block(nn.Module):
        def __init__(s):
            super().__init__()
            s.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False); s.b1 = nn.BatchNorm2d(cout)
            s.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False); s.b2 = nn.BatchNorm2d(cout)
            s.short = None
            if stride != 1 or cin != cout:
                s.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
        def forward(s, x):
            y = s.b2(s.c2(F.relu(s.b1(s.c1(x)))))
            return F.relu(y + (x if s.short is None else s.short(x)))
    return Block()


def resnet20(classes=10):
    layers, cin = [nn.Conv2d(1, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU()], 16
    for stage, width in enumerate([16, 32, 64]):
        for j in range(3):
            layers.append(block(cin, width, 2 if (j == 0 and stage > 0) else 1)); cin = width
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes))


def measure(name, model, batch, shape, dtype, tf32, a, channels_last=False):
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    m = model.cuda().train()
    if channels_last: m = m.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4, nesterov=True)
    scaler = torch.amp.GradScaler("cuda", enabled=dtype == torch.float16)
    x = torch.randn(batch, *shape, device="cuda"); y = torch.randint(0, 10, (batch,), device="cuda")
    if channels_last: x = x.contiguous(memory_format=torch.channels_last)
    torch.cuda.reset_peak_memory_stats()
    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = F.cross_entropy(m(x), y)
        scaler.scale(loss).backward(); scaler.step(opt); scaler.update()
    for _ in range(a.warmup): step()
    speeds = []
    for _ in range(a.repeats):
        torch.cuda.synchronize(); t = time.perf_counter()
        for _ in range(a.steps): step()
        torch.cuda.synchronize(); speeds.append(a.steps * batch / (time.perf_counter() - t))
    print(f"torch {torch.__version__} {name}: median {statistics.median(speeds):.1f} img/s "
          f"(runs {', '.join(f'{s:.1f}' for s in speeds)}), peak memory "
          f"{torch.cuda.max_memory_allocated() / 2**20:.0f} MiB", flush=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=10); p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3); p.add_argument("--only", default="")
    a = p.parse_args()
    print(f"device: {torch.cuda.get_device_name(0)}", flush=True)
    runs = [
        ("resnet50-224 batch64 fp32 (tf32 conv)", lambda: torchvision.models.resnet50(), 64, (3, 224, 224), None, True),
        ("resnet50-224 batch64 fp32 (no tf32)", lambda: torchvision.models.resnet50(), 64, (3, 224, 224), None, False),
        ("resnet50-224 batch64 fp16 amp", lambda: torchvision.models.resnet50(), 64, (3, 224, 224), torch.float16, True),
        ("resnet50-224 batch64 fp16 amp channels_last", lambda: torchvision.models.resnet50(), 64, (3, 224, 224),
         torch.float16, True),
        ("resnet50-224 batch64 bf16 amp", lambda: torchvision.models.resnet50(), 64, (3, 224, 224), torch.bfloat16, True),
        ("resnet50-224 batch64 bf16 amp channels_last", lambda: torchvision.models.resnet50(), 64, (3, 224, 224),
         torch.bfloat16, True),
        ("resnet20-28 batch128 fp32 (no tf32)", resnet20, 128, (1, 28, 28), None, False),
    ]
    exact = any(a.only == r[0] for r in runs)
    for name, make, batch, shape, dtype, tf32 in runs:
        if (a.only == name) if exact else (a.only in name):
            torch.manual_seed(0)
            measure(name, make(), batch, shape, dtype, tf32, a, channels_last=name.endswith("channels_last"))
