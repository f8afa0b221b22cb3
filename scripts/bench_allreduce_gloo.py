#!/usr/bin/python3
# scripts/bench_allreduce_gloo.py — the reference for ember's all-reduce benchmark
# (build/bench_allreduce): the same measurement and the same table, made with
# torch.distributed's gloo backend (dist.all_reduce, gloo's default algorithm).
# Run it with Debian's python3-torch: /usr/bin/python3, not the pyenv python.
#
#   RANK=i WORLD_SIZE=P MASTER_ADDR=host0 MASTER_PORT=29500 [GLOO_SOCKET_IFNAME=eth0] \
#     /usr/bin/python3 scripts/bench_allreduce_gloo.py [--sizes 1,4,16,64,256] [--dtype f32|f16]
#         [--iters 10] [--warmup 2] [--threads 1]      # one rank (torchrun's variables)
#   /usr/bin/python3 scripts/bench_allreduce_gloo.py --nproc 2 --sizes 1,16
#                                                   # N local ranks on 127.0.0.1 (loopback)
#   scripts/cluster_allreduce.sh --impl gloo ...     # ranks in the netns cluster
#
# Per size (MiB of buffer, 2^20 bytes): one untimed call that checks the result
# (every rank fills rank+1, each element must come back as P(P+1)/2; a wrong sum
# stops every rank with exit status 1), `warmup` untimed calls, then `iters`
# calls each timed alone after a barrier; rank 0 prints the median:
#   algbw = bytes / time, busbw = algbw * 2(P-1)/P (nccl-tests' bus bandwidth),
#   GB = 1e9 bytes. Gloo reads GLOO_SOCKET_IFNAME itself (the interface whose
#   address it publishes to its peers); without it, it uses the host name's address.
import argparse
import datetime
import os
import socket
import statistics
import subprocess
import sys
import time

DTYPES = {"f32": 4, "f16": 2}


def parse_args():
    p = argparse.ArgumentParser(description="gloo all-reduce benchmark (ember's bench_allreduce format)")
    p.add_argument("--sizes", default="1,4,16,64,256", help="buffer sizes in MiB, comma-separated")
    p.add_argument("--dtype", default="f32", choices=sorted(DTYPES))
    p.add_argument("--iters", type=int, default=10, help="timed calls per size")
    p.add_argument("--warmup", type=int, default=2, help="untimed calls per size")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    p.add_argument("--timeout", type=float, default=300, help="gloo timeout, seconds")
    p.add_argument("--nproc", type=int, default=0, help="spawn N local ranks on 127.0.0.1")
    a = p.parse_args()
    try:
        a.size_list = [float(s) for s in a.sizes.split(",") if s.strip()]
    except ValueError:
        p.error(f"bad --sizes '{a.sizes}'")
    if not a.size_list or any(s <= 0 for s in a.size_list):
        p.error(f"bad --sizes '{a.sizes}'")
    if a.iters < 1 or a.warmup < 0 or a.threads < 1 or a.nproc < 0:
        p.error("--iters and --threads must be >= 1, --warmup and --nproc >= 0")
    return a


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(a):
    """--nproc N: run N copies of this script (without --nproc) as ranks on loopback."""
    argv = [sys.executable, os.path.abspath(__file__), "--sizes", a.sizes, "--dtype", a.dtype,
            "--iters", str(a.iters), "--warmup", str(a.warmup), "--threads", str(a.threads),
            "--timeout", str(a.timeout)]
    port = free_port()
    procs = []
    for r in range(a.nproc):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(a.nproc), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port))
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
        procs.append(subprocess.Popen(argv, env=env))
    status = 0
    try:
        pending = list(procs)
        while pending:
            for p in list(pending):
                rc = p.poll()
                if rc is None:
                    continue
                pending.remove(p)
                if rc != 0 and status == 0:
                    status = rc if rc > 0 else 1
                    print(f"bench_allreduce_gloo: rank {procs.index(p)} exited with status {rc}; "
                          "stopping the others", file=sys.stderr)
                    for q in pending:
                        q.terminate()
            time.sleep(0.05)
    except KeyboardInterrupt:
        for p in procs:
            p.terminate()
        status = 130
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    return status


def worker(a):
    missing = [v for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if v not in os.environ]
    if missing:
        sys.exit(f"bench_allreduce_gloo: set {' '.join(missing)} (torchrun's variables) or use --nproc N")
    import torch
    import torch.distributed as dist

    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", init_method="env://",
                            timeout=datetime.timedelta(seconds=a.timeout))
    rank, P = dist.get_rank(), dist.get_world_size()
    dtype = {"f32": torch.float32, "f16": torch.float16}[a.dtype]
    esize = DTYPES[a.dtype]
    expect = P * (P + 1) / 2
    if rank == 0:
        print(f"# gloo all-reduce: {P} ranks, {a.dtype}, torch {torch.__version__}")
        print(f"#{'bytes':>13} {'ms(med)':>10} {'algbw GB/s':>11} {'busbw GB/s':>11}", flush=True)
    for mib in a.size_list:
        n = max(1, int(mib * (1 << 20)) // esize)
        nbytes = n * esize
        t = torch.empty(n, dtype=dtype)

        # Correctness, once per size, agreed on by every rank so that all stop together.
        t.fill_(rank + 1)
        dist.all_reduce(t)
        bad = (t != expect).nonzero()
        nbad = torch.tensor([bad.numel()], dtype=torch.int64)
        dist.all_reduce(nbad)
        if nbad.item() != 0:
            where = ""
            if bad.numel():
                i = bad[0].item()
                where = f"; first at element {i}: got {t[i].item()}, expected {expect}"
            print(f"bench_allreduce_gloo: rank {rank}: WRONG all-reduce result at {nbytes} bytes: "
                  f"{bad.numel()} bad elements here, {nbad.item()} over all ranks{where}",
                  file=sys.stderr, flush=True)
            sys.exit(1)

        t.zero_()  # sums stay 0: no overflow (f16) and no denormals over many calls
        for _ in range(a.warmup):
            dist.all_reduce(t)
        times = []
        for _ in range(a.iters):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(t)
            times.append(time.perf_counter() - t0)
        if rank == 0:
            sec = statistics.median(times)
            algbw = nbytes / sec / 1e9
            busbw = algbw * 2 * (P - 1) / P
            print(f"{nbytes:14d} {sec * 1e3:10.3f} {algbw:11.3f} {busbw:11.3f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


def main():
    a = parse_args()
    if a.nproc:
        return spawn(a)
    return worker(a)


if __name__ == "__main__":
    sys.exit(main())
