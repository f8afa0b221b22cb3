#!/usr/bin/env python3
"""scripts/torch_recipe.py — PyTorch training ember's Fashion-MNIST recipe, for
time-to-accuracy comparisons (DAWNBench style) with build/train_resnet.

It mirrors what ember's train_resnet does with the same flags (flag names and
defaults are ember's; apps/training/train_settings.cpp):
  model     CIFAR-style ResNet of depth 6n+2 (--num-layers, default 20):
            conv1 3x3/1 (16) + bn1 + relu, layer1..layer3 of n BasicBlocks
            (16, 32, 64 channels; the first block of layer2/layer3 has stride
            2 and a 1x1 conv + BN downsample), global average pool, fc
            (net/resnet.cpp). torchvision's names, so ember's checkpoints load
            into it (state_dict keys and shapes agree). BN eps 1e-5, momentum
            0.1. Initialisation as ember's (net/resnet.cpp, net/init.cpp):
            convs kaiming_normal fan_out (std sqrt(2 / fan_out)), BN gamma 1
            beta 0, fc weight and bias U(-1/sqrt(in), 1/sqrt(in)) (PyTorch's
            default); --zero-init-residual 1 starts every block's bn2 at
            gamma 0.
  input     uint8 images normalised inside the model as ember's first op
            (ops::normalize_u8): x * (1/std) - mean/std, mean 72.93, std
            90.015 in 0-255 (Fashion-MNIST's 0.2860 / 0.3530; --rgb-mean,
            --rgb-std).
  data      the first --num-examples training images (0: all 60000), a fresh
            shuffle every epoch, batches of --batch-size with the last partial
            batch kept (ember's BatchIterator has drop_last = false, so an
            epoch is ceil(n / batch) steps: 469 at batch 128).
  augment   per sample, on the uint8 image before normalisation: zero padding
            by --pad-size (2) and a random 28x28 crop (offsets uniform in
            [-pad, pad]), then a horizontal flip with p = 0.5
            (data/augment.cpp); --random-crop 0 / --random-mirror 0 turn them
            off. Padding is 0 in uint8, i.e. -mean/std after normalisation,
            as in ember.
  loss      cross entropy with --label-smoothing (0.1): target
            (1 - s) * onehot + s / classes (PyTorch's label_smoothing).
  optimizer SGD, --mom 0.9, --nesterov 1, --wd 5e-4 on conv and fc weights
            only (two parameter groups: batch-norm parameters and biases get
            no weight decay, net/sgd.h); the momentum buffer starts as the
            first gradient (the same update formula as torch.optim.SGD).
  schedule  --lr-schedule onecycle (ember's default, the only one here):
            torch.optim.lr_scheduler.OneCycleLR, cosine, pct_start 0.25,
            div_factor 25, final_div_factor 1e4, max_lr --lr, stepped every
            iteration over total_steps = --num-epochs * steps_per_epoch
            (net/lr_schedule.cpp computes the same formula per iteration).
            --lr-scaling linear: --lr is per 256 images, the peak lr is
            lr * batch / 256 (default none; ember multiplies by the global
            batch, batch x ranks: the batch here, one process).
            --moms A,B: momentum cycling, OneCycleLR's cycle_momentum with max_momentum A and base_momentum
            B (from A down to B while the lr rises, back to A while it
            falls, cosine); without --moms the momentum is --mom throughout.
            Both set the lr and the momentum of step i from the same
            formula before the step (net/lr_schedule.cpp lr_at/momentum_at).
            --warmup-epochs is accepted and ignored, as ember's onecycle
            ignores it (its warm-up is the first pct_start of the cycle;
            ember only checks 0 <= warmup-epochs <= num-epochs).
  eval      after every epoch, the 10k test images (--num-val-examples:
            the first N) in eval mode, batches of 500, no augmentation.
  stop      --target-accuracy A: stops after the first epoch whose
            validation accuracy is >= A and prints
            "Time to A: T s (E epochs)" (ember's format, %.3f / %.1f / %d);
            otherwise, at the end, ember's "Target accuracy A not reached in
            N epochs (last ACC)".

Time: wall time from the start of training (after loading the data and
building the model and the optimizer, as ember's fit() starts its clock)
through the last evaluation, evaluations included (DAWNBench counts them).
Per epoch it prints one line:
  Epoch[E] Train-accuracy=... Validation-accuracy=... Time cost=... elapsed=...
with ember's 0-based epochs; Time cost is the training part of the epoch (as
ember's "Epoch[E] Time cost", printed before its validation), elapsed the
time since the start, evaluation included. At the end:
  Finished N epochs in T s: Train-accuracy=... Validation-accuracy=...
(N: the epochs trained, fewer than --num-epochs when the target stopped it).

Usage (Debian's python3-torch 1.13, CPU; data from dataset-fashion-mnist):
  /usr/bin/python3 scripts/torch_recipe.py --num-layers 20 --num-epochs 8 \\
      --lr 0.4 --moms 0.95,0.85 --target-accuracy 0.93 --threads 2
  smoke run: --num-examples 2048 --num-epochs 2 --target-accuracy 0.5
scripts/tta_vs_torch.sh runs it against ember with the same flags.

Differences that remain:
  * random numbers: PyTorch's generators, not ember's Philox streams, so the
    initial weights, the shuffles and the crops/flips differ (same
    distributions); runs are not bit-identical to ember's, and accuracy per
    epoch differs by seed noise. Compare times to a target over several
    rounds, not single epochs.
  * kernels: PyTorch's CPU convolutions (oneDNN where it picks it) and
    reductions round differently from ember's; both train in fp32.
  * data loading: both keep the whole set in memory as uint8 tensors and
    assemble and augment each batch in the training loop (ember in parallel
    over samples with its thread pool, here with vectorised tensor
    indexing in the main thread); there is no DataLoader or worker process.
  * threads: --threads sets torch.set_num_threads (default 2 here; 0 takes
    every core, as ember's default 0 does). PyTorch's inter-op pool is left
    as it is.
  * bookkeeping inside the timed loop: ember also prints a line every
    --disp-batches batches (50), measures its data wait and peak RSS, and
    saves checkpoints when given --model-prefix (leave it out of a timed
    recipe); this script prints one line per epoch.
  * accuracy ties: ember's argmax counts a tie with the label's logit as
    wrong, torch.argmax takes the first maximum (no effect seen: ember's
    checkpoints evaluate to the same accuracy here).
  * PyTorch as it comes: default NCHW layout, no channels_last, no
    inference_mode or other tuning; a tuned PyTorch could be faster.
  * only ember's Fashion-MNIST path with the onecycle schedule: no record
    files, no step/cosine schedules, no fp16/bf16, no checkpoints, no
    data-parallel training.

Checked against ember (build/train_resnet of commit 942427b): the parameter
count (272186 for ResNet-20, ember's "0.27M"), state_dict names and shapes
equal those of ember's checkpoints, and an ember checkpoint loaded here
evaluates to ember's own Validation-accuracy; the augmentation equals a
port of ember's apply_augment; from an ember checkpoint and its momentum
buffers, ember's steps on one fixed batch imply the lr and momentum that
OneCycleLR gives (with and without --moms) and gradients that agree with
this model's to float32 noise.
"""
import argparse
import gzip
import math
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"


# ---------------------------------------------------------------- model
class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes, eps=1e-5, momentum=0.1)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes, eps=1e-5, momentum=0.1)
        self.downsample = None
        if stride != 1 or in_planes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(in_planes, planes, 1, stride, 0, bias=False),
                                            nn.BatchNorm2d(planes, eps=1e-5, momentum=0.1))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.downsample is None else self.downsample(x)))


class CifarResNet(nn.Module):
    """ember's CIFAR-style ResNet (net/resnet.cpp) with its uint8 input normalisation."""

    def __init__(self, num_layers=20, num_classes=10, in_channels=1, width=16, mean=(72.93,), std=(90.015,),
                 zero_init_residual=False):
        super().__init__()
        if num_layers < 8 or (num_layers - 2) % 6 != 0 or num_layers in (50, 152):
            raise SystemExit(f"--num-layers {num_layers}: this script has ember's CIFAR-style depths 6n+2 "
                             "(8, 14, 20, 26, 32, 44, 56, 110, ...)")
        n = (num_layers - 2) // 6
        self.num_layers = num_layers
        # ops::normalize_u8: y = x * (inv_std / 255) - mean * inv_std with ember's f32 ChannelNorm
        # (mean / 255 and 255 / std in f32, apps/training/input_norm.cpp), the products in double, then f32.
        mean01 = np.array([m / 255.0 for m in mean], np.float32).astype(np.float64)
        inv_std = np.array([255.0 / s for s in std], np.float32).astype(np.float64)
        scale, shift = (inv_std / 255.0).astype(np.float32), (-mean01 * inv_std).astype(np.float32)
        self.register_buffer("norm_scale", torch.from_numpy(scale).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("norm_shift", torch.from_numpy(shift).view(1, -1, 1, 1), persistent=False)
        self.conv1 = nn.Conv2d(in_channels, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width, eps=1e-5, momentum=0.1)
        in_planes = width
        for i, (planes, stride) in enumerate([(width, 1), (2 * width, 2), (4 * width, 2)]):
            blocks = []
            for b in range(n):
                blocks.append(BasicBlock(in_planes, planes, stride if b == 0 else 1))
                in_planes = planes
            setattr(self, f"layer{i + 1}", nn.Sequential(*blocks))
        self.fc = nn.Linear(in_planes, num_classes)
        # torchvision's initialisation, as ember's (net/resnet.cpp, net/init.cpp)
        for name, p in self.named_parameters():
            if name.startswith("fc."):
                bound = 1.0 / (in_planes ** 0.5)
                nn.init.uniform_(p, -bound, bound)
            elif p.dim() == 4:
                nn.init.kaiming_normal_(p, mode="fan_out", nonlinearity="relu")  # std sqrt(2 / fan_out)
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        if zero_init_residual:
            for layer in (self.layer1, self.layer2, self.layer3):
                for block in layer:
                    nn.init.zeros_(block.bn2.weight)

    def forward(self, x):
        if x.dtype == torch.uint8:
            x = x.float() * self.norm_scale + self.norm_shift
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        return self.fc(x)

    def describe(self):
        count = sum(p.numel() for p in self.parameters())
        return f"resnet-{self.num_layers} (CIFAR-style, {count / 1e6:.2f}M parameters)", count


# ----------------------------------------------------------------- data
def load_idx_images(path):
    with gzip.open(path) as f:
        magic, n, rows, cols = struct.unpack(">IIII", f.read(16))
        if magic != 2051:
            raise SystemExit(f"{path}: not an idx image file")
        return np.frombuffer(f.read(), np.uint8).reshape(n, 1, rows, cols)


def load_idx_labels(path):
    with gzip.open(path) as f:
        magic, n = struct.unpack(">II", f.read(8))
        if magic != 2049:
            raise SystemExit(f"{path}: not an idx label file")
        return np.frombuffer(f.read(), np.uint8).astype(np.int64)


def load_fashion_mnist(root, train):
    prefix = "train" if train else "t10k"
    x = load_idx_images(os.path.join(root, f"{prefix}-images-idx3-ubyte.gz"))
    y = load_idx_labels(os.path.join(root, f"{prefix}-labels-idx1-ubyte.gz"))
    return torch.from_numpy(x.copy()), torch.from_numpy(y.copy())


def augment(images, pad, flip, gen):
    """Per-sample random crop of the zero-padded image and horizontal flip (data/augment.cpp):
    out[c, y, x] = padded[c, y + dy, x' + dx] with x' = W-1-x when flipped; dy, dx uniform in [0, 2*pad]."""
    B, C, H, W = images.shape
    if pad == 0 and not flip:
        return images
    rows = torch.arange(H).expand(B, H)
    cols = torch.arange(W).expand(B, W)
    if pad > 0:
        padded = images.new_zeros(B, C, H + 2 * pad, W + 2 * pad)
        padded[:, :, pad:pad + H, pad:pad + W] = images
        dy = torch.randint(0, 2 * pad + 1, (B, 1), generator=gen)
        dx = torch.randint(0, 2 * pad + 1, (B, 1), generator=gen)
        rows, cols = rows + dy, cols + dx
    else:
        padded = images
    if flip:
        mirrored = torch.rand(B, generator=gen) < 0.5
        cols = torch.where(mirrored[:, None], cols.flip(1), cols)
    b = torch.arange(B)[:, None, None]
    out = padded.permute(0, 2, 3, 1)[b, rows[:, :, None], cols[:, None, :]]  # [B, H, W, C]
    return out.permute(0, 3, 1, 2).contiguous()


# ---------------------------------------------------------------- flags
def boolean(text):
    if text in ("1", "true"):
        return True
    if text in ("0", "false"):
        return False
    raise argparse.ArgumentTypeError(f"'{text}' is not 0, 1, true or false")


def moms(text):
    try:
        a, b = (float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not MAX,MIN (e.g. 0.95,0.85)")
    return a, b


def number_list(text):
    return tuple(float(v) for v in text.split(","))


def parse_args(argv):
    p = argparse.ArgumentParser(description="PyTorch running ember's Fashion-MNIST recipe (see the header).",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter, allow_abbrev=False)
    flag = lambda name, **kw: p.add_argument("--" + name, **kw)  # noqa: E731
    onoff = lambda name, default, help: flag(name, type=boolean, nargs="?", const=True, default=default,  # noqa: E731
                                             metavar="0|1", help=help)
    flag("network", default="resnet", choices=["resnet"], help="accepted for ember's command line")
    flag("dataset", default="fashion-mnist", choices=["fashion-mnist"], help="accepted for ember's command line")
    flag("data-dir", default=FASHION_MNIST_DIR, help="directory with the idx .gz files")
    flag("num-layers", type=int, default=20, help="CIFAR-style depth 6n+2")
    onoff("zero-init-residual", False, "start the last BN of every block at gamma = 0")
    flag("num-examples", type=int, default=0, help="train on the first N training images only (0: all)")
    flag("num-val-examples", type=int, default=0, help="validate on the first N test images only (0: all)")
    onoff("random-crop", True, "random crop after zero padding by --pad-size")
    onoff("random-mirror", True, "random horizontal flip")
    flag("pad-size", type=int, default=2, help="padding for --random-crop, in pixels")
    flag("rgb-mean", type=number_list, default=(72.93,), help="per-channel mean in 0-255")
    flag("rgb-std", type=number_list, default=(90.015,), help="per-channel standard deviation in 0-255")
    flag("batch-size", type=int, default=128, help="images per step")
    flag("num-epochs", type=int, default=10, help="epochs of the schedule")
    flag("lr", type=float, default=0.2, help="peak learning rate (per 256 images with --lr-scaling linear)")
    flag("lr-scaling", default="none", choices=["none", "linear"], help="linear: the peak lr is lr * batch / 256")
    flag("lr-schedule", default="onecycle", choices=["onecycle"], help="only ember's default schedule")
    flag("mom", type=float, default=0.9, help="momentum (without --moms)")
    flag("moms", type=moms, default=None, metavar="MAX,MIN",
         help="cycle the momentum from MAX down to MIN and back (OneCycleLR's cycle_momentum)")
    flag("wd", type=float, default=5e-4, help="weight decay (not on batch-norm parameters and biases)")
    onoff("nesterov", True, "Nesterov momentum")
    flag("label-smoothing", type=float, default=0.1, help="label smoothing of the cross-entropy loss")
    flag("warmup-epochs", type=float, default=0.0, help="ignored: onecycle has its own warm-up, as in ember")
    flag("target-accuracy", type=float, default=0.0, help="stop when validation accuracy >= this (0: never)")
    flag("threads", type=int, default=2, help="torch.set_num_threads (0: every core)")
    flag("seed", type=int, default=0, help="seed of initialisation, shuffling and augmentation")
    a = p.parse_args(argv)
    checks = [(a.batch_size > 0, "--batch-size must be positive"),
              (a.num_epochs > 0, "--num-epochs must be positive"), (a.lr > 0, "--lr must be positive"),
              (a.num_examples >= 0, "--num-examples must be >= 0"),
              (a.num_val_examples >= 0, "--num-val-examples must be >= 0"),
              (a.pad_size >= 0, "--pad-size must be >= 0"),
              (a.mom >= 0, "--mom must be >= 0"), (a.wd >= 0, "--wd must be >= 0"),
              (0 <= a.label_smoothing < 1, "--label-smoothing must be in [0, 1)"),
              (0 <= a.warmup_epochs <= a.num_epochs, "--warmup-epochs must be in [0, --num-epochs]"),
              (a.threads >= 0, "--threads must be >= 0"),
              (0 <= a.target_accuracy <= 1, "--target-accuracy must be in [0, 1] (e.g. 0.93)"),
              (len(a.rgb_mean) == 1 and len(a.rgb_std) == 1 and a.rgb_std[0] > 0,
               "--rgb-mean/--rgb-std: one value each (Fashion-MNIST has one channel), std > 0")]
    if a.moms is None:
        checks.append((not a.nesterov or a.mom > 0, "--nesterov needs --mom > 0"))
    else:
        checks.append((0 < a.moms[1] <= a.moms[0] < 1, "--moms MAX,MIN: need 0 < MIN <= MAX < 1, e.g. 0.95,0.85"))
    for ok, message in checks:
        if not ok:
            p.error(message)
    return a


# ---------------------------------------------------------------- training
def evaluate(model, images, labels, batch_size=500):
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(images), batch_size):
            correct += (model(images[i:i + batch_size]).argmax(1) == labels[i:i + batch_size]).sum().item()
    model.train()
    return correct / len(images)


def main(argv):
    a = parse_args(argv)
    threads = a.threads if a.threads > 0 else len(os.sched_getaffinity(0))
    torch.set_num_threads(threads)
    print("Start training with: " + " ".join(f"{k.replace('_', '-')}={v}" for k, v in sorted(vars(a).items())))
    print(f"torch {torch.__version__}, threads={torch.get_num_threads()}")

    xtr, ytr = load_fashion_mnist(a.data_dir, True)
    xte, yte = load_fashion_mnist(a.data_dir, False)
    if 0 < a.num_examples < len(xtr):
        xtr, ytr = xtr[:a.num_examples].contiguous(), ytr[:a.num_examples].contiguous()
    if 0 < a.num_val_examples < len(xte):
        xte, yte = xte[:a.num_val_examples].contiguous(), yte[:a.num_val_examples].contiguous()
    n, bs = len(xtr), a.batch_size
    steps_per_epoch = (n + bs - 1) // bs  # drop_last = false: the partial batch is a step
    total_steps = a.num_epochs * steps_per_epoch
    print(f"data: fashion-mnist/train ({n} images), validation fashion-mnist/test ({len(xte)} images); "
          f"{steps_per_epoch} steps per epoch, {total_steps} in all")

    torch.manual_seed(a.seed)
    model = CifarResNet(a.num_layers, num_classes=10, in_channels=1, mean=a.rgb_mean, std=a.rgb_std,
                        zero_init_residual=a.zero_init_residual)
    description, count = model.describe()
    print(f"model: {description}; {count} parameters")

    decay = [p for p in model.parameters() if p.dim() > 1]       # conv and fc weights (ember's decay flag)
    no_decay = [p for p in model.parameters() if p.dim() <= 1]   # batch-norm gamma and beta, fc bias
    peak_lr = a.lr * bs / 256.0 if a.lr_scaling == "linear" else a.lr
    momentum = a.moms[0] if a.moms else a.mom
    opt = torch.optim.SGD([{"params": decay, "weight_decay": a.wd}, {"params": no_decay, "weight_decay": 0.0}],
                          lr=peak_lr, momentum=momentum, nesterov=a.nesterov)
    cycle = dict(cycle_momentum=True, max_momentum=a.moms[0], base_momentum=a.moms[1]) if a.moms \
        else dict(cycle_momentum=False)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=peak_lr, total_steps=total_steps, pct_start=0.25,
                                                anneal_strategy="cos", div_factor=25.0, final_div_factor=1e4,
                                                three_phase=False, **cycle)
    print(f"schedule: onecycle, peak lr {peak_lr:g}{' (--lr-scaling linear)' if a.lr_scaling == 'linear' else ''}, "
          + (f"momentum cycled {a.moms[0]:g} -> {a.moms[1]:g} -> {a.moms[0]:g}" if a.moms else f"momentum {a.mom:g}")
          + (f"; --warmup-epochs {a.warmup_epochs:g} ignored (onecycle warms up itself)" if a.warmup_epochs else ""))
    gen = torch.Generator().manual_seed(a.seed)  # shuffles and augmentation
    pad = a.pad_size if a.random_crop else 0
    sys.stdout.flush()

    start = time.perf_counter()
    train_acc = val_acc = 0.0
    epochs_done = 0
    reached = False
    model.train()
    for epoch in range(a.num_epochs):
        epoch_start = time.perf_counter()
        order = torch.randperm(n, generator=gen)
        correct = 0
        for i in range(steps_per_epoch):
            idx = order[i * bs:(i + 1) * bs]
            xb, yb = augment(xtr[idx], pad, a.random_mirror, gen), ytr[idx]
            logits = model(xb)
            loss = F.cross_entropy(logits, yb, label_smoothing=a.label_smoothing)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            lr = opt.param_groups[0]["lr"]
            opt.step()
            sched.step()
            if not math.isfinite(loss.item()):
                raise SystemExit(f"training diverged at Epoch[{epoch}] Batch [{i}]: loss is {loss.item()} "
                                 f"(lr {lr:g}); try a lower --lr")
            correct += (logits.detach().argmax(1) == yb).sum().item()
        train_acc = correct / n
        cost = time.perf_counter() - epoch_start
        val_acc = evaluate(model, xte, yte)
        elapsed = time.perf_counter() - start
        epochs_done = epoch + 1
        print(f"Epoch[{epoch}] Train-accuracy={train_acc:.6f} Validation-accuracy={val_acc:.6f} "
              f"Time cost={cost:.3f} elapsed={elapsed:.1f}", flush=True)
        if a.target_accuracy > 0 and val_acc >= a.target_accuracy:
            print(f"Time to {a.target_accuracy:.3f}: {elapsed:.1f} s ({epochs_done} epochs)", flush=True)
            reached = True
            break
    seconds = time.perf_counter() - start
    if a.target_accuracy > 0 and not reached:
        print(f"Target accuracy {a.target_accuracy:.3f} not reached in {a.num_epochs} epochs (last {val_acc:.6f})")
    print(f"Finished {epochs_done} epochs in {seconds:.1f} s: Train-accuracy={train_acc:.6f} "
          f"Validation-accuracy={val_acc:.6f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
