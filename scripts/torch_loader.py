#!/usr/bin/python3
# scripts/torch_loader.py — torchvision's loader at any output size, for
# scripts/bench_loader.sh: ImageFolder + RandomResizedCrop(SIZE) +
# RandomHorizontalFlip + PILToTensor, DataLoader batches of 64, shuffled.
# The yardstick of ember's record loader (data/image_loader.h): what a
# PyTorch user would write, one worker process per thread given.
#
#   /usr/bin/python3 scripts/torch_loader.py DIR [workers] [passes] [size]
#
# Prints "torchvision loader workers=W size=S img/s=R" for `passes` timed
# passes after a warm-up pass (file cache, worker start).
import sys
import time

import torch
import torchvision.transforms as T
from torch.utils.data import DataLoader
from torchvision.datasets import ImageFolder

torch.set_num_threads(1)
d = sys.argv[1]
workers = int(sys.argv[2]) if len(sys.argv) > 2 else 2
passes = int(sys.argv[3]) if len(sys.argv) > 3 else 2
size = int(sys.argv[4]) if len(sys.argv) > 4 else 224
ds = ImageFolder(d, T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.PILToTensor()]))
dl = DataLoader(ds, batch_size=64, shuffle=True, num_workers=workers, persistent_workers=workers > 0)
for _ in dl:
    pass
n = 0
t = time.perf_counter()
for _ in range(passes):
    for x, y in dl:
        n += x.shape[0]
dt = time.perf_counter() - t
print(f"torchvision loader workers={workers} size={size} img/s={n / dt:.1f}")
