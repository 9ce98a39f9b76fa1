#!/usr/bin/env python3
"""bench_scaling JSON lines -> PNG plots (matplotlib): p50 latency and QPS against ranks,
scaling efficiency, and the time split per batch (scan / communication = broadcast + all-gather /
merge / other = host round trip, control and skew). torch_sharded.py records in the same files
are drawn as dashed lines. One set of plots per scaling mode (strong, weak).

usage: bench/plot_scaling.py scaling.jsonl [more.jsonl] -o OUTDIR
needs matplotlib: apt-get install python3-matplotlib (launch/setup.sh does not install it)
"""
import argparse
import json
import os
import sys

try:
    import matplotlib
except ImportError:
    sys.exit("plot_scaling.py needs matplotlib: apt-get install python3-matplotlib")

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(paths):
    recs = []
    for p in paths:
        with open(p) as f:
            recs += [json.loads(l) for l in f if l.strip() and not l.startswith("#")]
    return recs


def series_key(r):
    size = f"{r['rows_per_rank']}/rank" if r.get("scaling") == "weak" else f"N={r['rows_total']}"
    return f"{size} D={r['dim']} {r['dtype']} K={r['k']} B={r['batch']}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("jsonl", nargs="+")
    ap.add_argument("-o", "--out", default="plots")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    recs = load(a.jsonl)
    written = []
    for mode in ("strong", "weak"):
        ours, theirs = {}, {}
        for r in recs:
            if r.get("scaling", "strong") != mode or r.get("p50_ms") is None:
                continue
            if r.get("bench") == "bench_scaling":
                ours.setdefault(series_key(r), {})[r["ranks"]] = r  # latest record per rank count
            elif r.get("impl") == "torch-dist":
                theirs.setdefault(series_key(r), {})[r["ranks"]] = r
        if not ours:
            continue
        fig, axes = plt.subplots(1, 3, figsize=(17, 4.8))
        for name, by in sorted(ours.items()):
            P = sorted(by)
            line, = axes[0].plot(P, [by[p]["p50_ms"] * 1e3 for p in P], "o-", label=f"shardtopk {name}")
            axes[1].plot(P, [by[p]["qps"] for p in P], "o-", color=line.get_color(), label=f"shardtopk {name}")
            eff = [(p, by[p]["efficiency"]) for p in P if by[p].get("efficiency") is not None]
            if eff:
                axes[2].plot([e[0] for e in eff], [e[1] for e in eff], "o-", color=line.get_color(), label=name)
            if name in theirs:
                T = sorted(theirs[name])
                axes[0].plot(T, [theirs[name][p]["p50_ms"] * 1e3 for p in T], "s--", color=line.get_color(),
                             label=f"torch.distributed {name}")
                axes[1].plot(T, [theirs[name][p]["qps"] for p in T], "s--", color=line.get_color())
        axes[0].set(xlabel="ranks (GPUs)", ylabel="p50 per batch, host to host (us)", title=f"{mode} scaling: latency")
        axes[1].set(xlabel="ranks (GPUs)", ylabel="queries per second", title="throughput")
        axes[2].set(xlabel="ranks (GPUs)", ylabel="efficiency", title="efficiency vs 1 rank", ylim=(0, 1.2))
        axes[2].axhline(0.9, color="grey", lw=0.8, ls=":")
        for ax in axes:
            ax.set_xscale("log", base=2)
            ax.grid(alpha=0.3)
        axes[0].set_yscale("log")
        axes[1].set_yscale("log")
        axes[0].legend(fontsize=7)
        axes[2].legend(fontsize=7)
        fig.tight_layout()
        p = os.path.join(a.out, f"scaling_{mode}.png")
        fig.savefig(p, dpi=110)
        plt.close(fig)
        written.append(p)

        # time split: one bar group per series, one bar per rank count
        names = sorted(ours)
        fig, ax = plt.subplots(figsize=(min(18, max(6, 1.2 * sum(len(ours[n]) for n in names))), 5.5))
        x, labels = 0, []
        parts = [("scan", "#4c72b0"), ("communication", "#dd8452"), ("merge", "#55a868"), ("other", "#8c8c8c")]
        used = set()
        for name in names:
            for P in sorted(ours[name]):
                r = ours[name][P]
                scan = (r.get("scan_ms") or 0) * 1e3
                comm = ((r.get("bcast_ms") or 0) + (r.get("gather_ms") or 0)) * 1e3
                merge = (r.get("merge_ms") or 0) * 1e3
                other = max(0.0, r["p50_ms"] * 1e3 - scan - comm - merge)
                bottom = 0
                for (label, color), v in zip(parts, (scan, comm, merge, other)):
                    ax.bar(x, v, bottom=bottom, color=color, label=label if label not in used else None)
                    used.add(label)
                    bottom += v
                labels.append(f"{name}\n{P} rank(s)")
                x += 1
            x += 0.5
        ax.set_ylabel("us per batch (p50)")
        ax.set_title(f"{mode} scaling: where the time goes (steps: p50 of instrumented iterations; other = p50 - steps)")
        pos, x = [], 0
        for name in names:
            for _ in sorted(ours[name]):
                pos.append(x)
                x += 1
            x += 0.5
        ax.set_xticks(pos)
        ax.set_xticklabels(labels, fontsize=6, rotation=30, ha="right")
        ax.legend()
        ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        p = os.path.join(a.out, f"split_{mode}.png")
        fig.savefig(p, dpi=110)
        plt.close(fig)
        written.append(p)
    for p in written:
        print(p)
    if not written:
        print("no bench_scaling records with timings", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
