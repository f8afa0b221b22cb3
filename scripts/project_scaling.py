#!/usr/bin/env python3
"""scripts/project_scaling.py — the step-time model of data-parallel training
behind the projection in docs/benchmarks.md (docs/runs/data_parallel_scaling.md):
a step costs its computation plus the part of the gradient all-reduce that
backward could not hide.

    T_comm(P) = 2(P-1)/P * gradient_bytes / (link_rate * link_efficiency) + 2(P-1) * hop_latency
    hidden    = min(hidden_share * T_comm(P), backward_share * T_compute)
    T_step(P) = T_compute + T_comm(P) - hidden
    efficiency(P) = T_compute / T_step(P)     (throughput per host relative to one host)

link_efficiency is the measured bus bandwidth as a fraction of the link rate
(build/bench_allreduce on scripts/netns_cluster.sh links), hidden_share the
measured share of all-reduce time hidden behind backward (train_resnet's
"All-reduce: ... hidden" line). The calibration mode checks the model
against measured step times:

    python3 scripts/project_scaling.py calibrate --compute-ms 1850 --grad-mb 97.5 \\
        --link-gbit 1 --link-eff 0.95 --hidden 0.55 --measured 2:2700,4:3100
    python3 scripts/project_scaling.py project --compute-ms 320 --grad-mb 51.2 \\
        --link-gbit 25 --link-eff 0.95 --hidden 0.55 --hosts 2,4,8,16,32
"""
import argparse


def comm_ms(p, grad_mb, link_gbit, eff, hop_us):
    if p < 2:
        return 0.0
    rate = link_gbit * 1e9 / 8 * eff  # bytes/s on the wire
    return (2 * (p - 1) / p * grad_mb * 2**20 / rate + 2 * (p - 1) * hop_us * 1e-6) * 1e3


def step_ms(p, a):
    c = comm_ms(p, a.grad_mb, a.link_gbit, a.link_eff, a.hop_us)
    hidden = min(a.hidden * c, a.backward_share * a.compute_ms)
    return c, c - hidden, a.compute_ms + c - hidden


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["project", "calibrate"])
    ap.add_argument("--compute-ms", type=float, required=True, help="one step's computation on one host")
    ap.add_argument("--grad-mb", type=float, required=True, help="gradient MiB all-reduced per step")
    ap.add_argument("--link-gbit", type=float, required=True)
    ap.add_argument("--link-eff", type=float, default=0.95, help="measured busbw / link rate")
    ap.add_argument("--hop-us", type=float, default=50.0, help="latency per ring hop")
    ap.add_argument("--hidden", type=float, required=True, help="measured share of all-reduce hidden behind backward")
    ap.add_argument("--backward-share", type=float, default=2 / 3, help="share of the step that is backward")
    ap.add_argument("--hosts", default="2,4,8,16,32")
    ap.add_argument("--measured", default="", help="calibrate: P:step_ms,... measured")
    a = ap.parse_args()
    if a.mode == "project":
        print(f"| hosts | all-reduce ms | exposed ms | step ms | scaling efficiency |")
        print("| --- | --- | --- | --- | --- |")
        print(f"| 1 | 0 | 0 | {a.compute_ms:.0f} | 100% |")
        for p in [int(x) for x in a.hosts.split(",")]:
            c, exposed, t = step_ms(p, a)
            print(f"| {p} | {c:.1f} | {exposed:.1f} | {t:.1f} | {100 * a.compute_ms / t:.1f}% |")
    else:
        print("| ranks | model all-reduce ms | model exposed ms | model step ms | measured step ms | model / measured |")
        print("| --- | --- | --- | --- | --- | --- |")
        for item in a.measured.split(","):
            p, measured = item.split(":")
            c, exposed, t = step_ms(int(p), a)
            print(f"| {p} | {c:.1f} | {exposed:.1f} | {t:.1f} | {float(measured):.1f} | {t / float(measured):.2f} |")


if __name__ == "__main__":
    main()
