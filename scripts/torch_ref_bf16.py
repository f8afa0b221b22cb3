#!/usr/bin/env python3
"""scripts/torch_ref_bf16.py — PyTorch's CPU bf16 autocast training throughput,
the yardstick for ember's --precision bf16 (a benchmark script; ember itself
never needs Python).

usage: python3 scripts/torch_ref_bf16.py throughput [--model resnet20|resnet50_224]
                                                    [--batch 128] [--size 28] [--steps 20] [--warmup 3]

scripts/torch_ref.py with --autocast bf16 as its default: the same models,
data and step, with the forward pass and the loss under
torch.autocast("cpu", dtype=torch.bfloat16) (convolutions and matrix
products in bf16, f32 weights and optimizer). Same command line as
torch_ref.py's "throughput", so scripts/bench_vs_torch.sh takes it as
TORCH_REF:

    EMBER_FLAGS="--precision bf16" TORCH_REF=scripts/torch_ref_bf16.py \\
        scripts/bench_vs_torch.sh resnet20
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_ref  # noqa: E402  (scripts/torch_ref.py, beside this file)

if __name__ == "__main__":
    torch_ref.main(autocast="bf16")
