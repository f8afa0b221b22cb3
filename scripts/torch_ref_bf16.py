"""PyTorch's CPU bf16 autocast training throughput, the yardstick for ember's
--precision bf16 (a benchmark script; ember itself never needs Python).

usage: python3 scripts/torch_ref_bf16.py throughput [--model resnet20|resnet50_224]
                                                    [--batch 128] [--size 28] [--steps 20] [--warmup 3]

The model, the data (random tensors) and the step (SGD with momentum, cross
entropy) are those of ../shared/bench/torch_ref.py, imported from beside the
repository (TORCH_REF_BASE overrides the path); the only change is the
forward pass and the loss run under torch.autocast("cpu", dtype=torch.bfloat16):
convolutions and matrix products in bf16 (oneDNN's bf16 kernels where the
CPU has AVX512-BF16 or AMX), f32 weights and optimiser, as PyTorch's CPU
mixed precision recipe has it. Same command line as torch_ref.py's
"throughput", so scripts/bench_vs_torch.sh takes it as TORCH_REF:

    EMBER_FLAGS="--precision bf16" TORCH_REF=scripts/torch_ref_bf16.py \\
        scripts/bench_vs_torch.sh resnet20
"""
import argparse, importlib.util, os, sys, time

here = os.path.dirname(os.path.abspath(__file__))
base = os.environ.get("TORCH_REF_BASE", os.path.join(here, "..", "..", "shared", "bench", "torch_ref.py"))
if not os.path.exists(base):
    sys.exit(f"torch_ref_bf16.py: {base} is missing (set TORCH_REF_BASE to torch_ref.py)")
spec = importlib.util.spec_from_file_location("torch_ref", base)
ref = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ref)  # defines the models; its __main__ block does not run
torch, F = ref.torch, ref.F


def throughput(a):
    in_ch = 3 if a.model == "resnet50_224" else 1
    m = ref.make(a.model, in_ch)
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    x = torch.randn(a.batch, in_ch, a.size, a.size)
    y = torch.randint(0, 10, (a.batch,))

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.cross_entropy(m(x), y)
        loss.backward()
        opt.step()

    for _ in range(a.warmup):
        step()
    t = time.perf_counter()
    for _ in range(a.steps):
        step()
    dt = time.perf_counter() - t
    print(f"torch {torch.__version__} bf16 autocast {a.model} batch={a.batch} size={a.size} "
          f"train img/s={a.steps * a.batch / dt:.1f}")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["throughput"])
    p.add_argument("--model", default="resnet20")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--size", type=int, default=28)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    throughput(p.parse_args())
