"""Sums Nsight Compute's per-launch kernel times by kernel, from the CSV that
`ncu --metrics gpu__time_duration.sum --csv ...` prints (scripts/gpu_check.sh part 5 writes them).

usage: python3 scripts/ncu_summary.py FILE.csv [more.csv ...] [--top 12]
Prints, per file: launches, total time, and the kernels taking the most time (share, calls, mean per call).
"""
import argparse, collections, csv, re


def short_name(name):
    name = re.sub(r"\(anonymous namespace\)::|<?unnamed>::", "", name)  # ncu prints "unnamed>::"
    name = re.sub(r"\(.*", "", name).strip()          # argument list
    name = re.sub(r"<.*", "", name)                    # template arguments
    return re.sub(r"^void\s+", "", name)[:72]


def summarize(path, top):
    rows = [r for r in csv.reader(open(path, newline="")) if len(r) > 10]
    if not rows:
        print(f"{path}: no kernel rows"); return
    head, rows = rows[0], rows[1:]
    k, v, u = head.index("Kernel Name"), head.index("Metric Value"), head.index("Metric Unit")
    total, calls, unit = collections.Counter(), collections.Counter(), rows[0][u]
    for r in rows:
        n = short_name(r[k]); total[n] += float(r[v].replace(",", "")); calls[n] += 1
    scale = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0}.get(unit, 1.0)
    all_ms = sum(total.values()) * scale
    print(f"{path}: {len(rows)} launches, {all_ms:.1f} ms of kernel time")
    print(f"  {'share':>6} {'calls':>6} {'ms/call':>9}  kernel")
    for n, t in total.most_common(top):
        print(f"  {100 * t * scale / all_ms:5.1f}% {calls[n]:6d} {t * scale / calls[n]:9.3f}  {n}")


if __name__ == "__main__":
    p = argparse.ArgumentParser(); p.add_argument("files", nargs="+"); p.add_argument("--top", type=int, default=12)
    a = p.parse_args()
    for f in a.files: summarize(f, a.top)
