#!/usr/bin/env python3
"""Plots of Spire's allreduce and scaling (bench/calibrate_scaling.sh runs it):

- allreduce_busbw.png: bus bandwidth vs size of Spire's default, its ring,
  MPI_Allreduce and the memcpy ceiling (rows of
  bench/mpi_allreduce_bandwidth --csv), one panel per setting and rank count;
- scaling_efficiency.png: simulated scaling efficiency of ResNet-50 (25.6 M
  f32 parameters, bucketed allreduce overlapping the backward pass) from 8
  to 1024 ranks on the stated cluster models, beside the published figures
  (Horovod: ~90% at 512 GPUs; Goyal et al.: ~90% from 8 to 256 GPUs), and
  the MNIST convnet on this machine: measured HorovodTrainer efficiency
  (--measured RANKS=EFF) and the simulator's prediction from the fitted
  shared-memory constants (--fit);
- predicted_vs_measured.png: every fitted configuration's predicted and
  measured time from 1 MiB (--fit; runs pooled by median), the 15% band
  drawn;
- busbw.md: the bus bandwidth table of bench/DISTRIBUTED.md (runs pooled by
  median).

- the right panel of scaling_efficiency.png also shows the ResNets on this
  machine (--resnet: the table bench/resnet_scaling.sh prints): measured
  2-rank HorovodTrainer efficiency per link and fusion setting beside the
  simulator's prediction for the same configuration (the fitted constants of
  that link, the measured 1-rank step, the fusion threshold).

usage: bench/plot_scaling.py (--csv FILE... | --report fit.txt) [--fit fit.json] [--measured 2=0.96 ...]
                             [--resnet TABLE] [--out DIR]
  --report: the rows of a fit report (bench/report/fit.txt) instead of CSV files, fitted again
  (the busbw panels and table need the CSV files; with --report only the efficiency plot and
  predicted_vs_measured.png are drawn).
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "scripts"))
import scaling_sim as sim  # noqa: E402
import scaling_crossval  # noqa: E402

# The MNIST convnet of examples/mnist_convnet (836,522 f32 parameters) and one
# rank's step at batch 128 on this machine (~2950 images/s: 43 ms).
MNIST_BYTES = 836522 * 4
MNIST_STEP_S = 128 / 2950.0

CLUSTERS = [
    ("8 GPUs/node, NVLink-class inside, 100 Gb/s between nodes",
     dict(per_node=8, intra=sim.Link(3e-6, 1 / 150e9), inter=sim.Link(10e-6, 8 / 100e9), gamma=1 / 500e9)),
    ("8 GPUs/node, NVLink-class inside, 400 Gb/s between nodes",
     dict(per_node=8, intra=sim.Link(3e-6, 1 / 150e9), inter=sim.Link(10e-6, 8 / 400e9), gamma=1 / 500e9)),
    ("4 GPUs/node, PCIe inside, 25 Gb/s between nodes (Horovod paper era)",
     dict(per_node=4, intra=sim.Link(8e-6, 1 / 10e9), inter=sim.Link(25e-6, 8 / 25e9), gamma=1 / 200e9)),
]
RESNET_STEP_S = 0.200  # one rank's forward+backward, ResNet-50 batch 64, V100-class


def cluster(spec, ranks):
    per = min(spec["per_node"], ranks)
    return sim.Cluster(max(1, ranks // per), per, spec["intra"], spec["inter"], spec["gamma"])


def save(plt, fig, out, name):
    """Writes `fig` to OUT/NAME and returns the path."""
    fig.tight_layout()
    path = os.path.join(out, name)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_busbw(plt, rows, out):
    rows = sim.pool_rows(rows)  # several runs: their median
    panels = sorted({(r["setting"], r["ranks"]) for r in rows},
                    key=lambda k: (k[0] != "shm", k[0], k[1]))
    panels = [p for p in panels if p[1] in (2, 4)] or panels
    cols = min(2, len(panels))
    nrows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(6 * cols, 3.8 * nrows), squeeze=False)
    styles = {"auto": ("Spire (auto)", "-o"), "ring": ("Spire ring", "--s"), "mpi": ("MPI_Allreduce", "-^"),
              "memcpy": ("memcpy (GB/s)", ":")}
    for ax, (setting, ranks) in zip([a for row in axes for a in row], panels):
        for algo, (label, style) in styles.items():
            pts = sorted((r["bytes"], r["seconds"]) for r in rows
                         if r["setting"] == setting and r["ranks"] == ranks and r["algorithm"] == algo)
            if not pts:
                continue
            if algo == "memcpy":
                ys = [b / t / 1e9 for b, t in pts]
            else:
                ys = [sim.bus_bandwidth(ranks, b, t) / 1e9 for b, t in pts]
            ax.plot([b for b, _ in pts], ys, style, label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("bytes")
        ax.set_ylabel("bus bandwidth, GB/s")
        ax.set_title(f"{setting}, {ranks} ranks")
        ax.grid(True, alpha=0.3, which="both")
        ax.legend(fontsize=8)
    for ax in [a for row in axes for a in row][len(panels):]:
        ax.axis("off")
    return save(plt, fig, out, "allreduce_busbw.png")


def busbw_table(rows, out, sizes=(1 << 20, 4 << 20, 16 << 20, 64 << 20), ranks=(2, 4)):
    """Writes OUT/busbw.md: the bus bandwidth (GB/s) of every algorithm and
    the memcpy ceiling (GB/s of one copy) per setting, rank count and size,
    the runs pooled by median (the table bench/DISTRIBUTED.md shows)."""
    rows = sim.pool_rows(rows)
    cols = [("auto", "Spire auto"), ("ring", "Spire ring"), ("rd", "Spire rec-dbl"), ("hd", "Spire halv-dbl"),
            ("mpi", "MPI_Allreduce"), ("memcpy", "memcpy")]
    t = {(r["setting"], r["ranks"], r["bytes"], r["algorithm"]): r["seconds"] for r in rows}
    lines = ["| setting | ranks | size | " + " | ".join(name for _, name in cols) + " |",
             "| --- | --- | --- | " + " | ".join("---" for _ in cols) + " |"]
    settings = sorted({r["setting"] for r in rows}, key=lambda x: (x != "shm", x != "tcp", x))
    for setting in settings:
        for p in ranks:
            for n in sizes:
                if (setting, p, n, "ring") not in t:
                    continue
                cells = []
                for algo, _ in cols:
                    sec = t.get((setting, p, n, algo))
                    if sec is None:
                        cells.append("")
                    elif algo == "memcpy":
                        cells.append(f"{n / sec / 1e9:.2f}")
                    else:
                        cells.append(f"{sim.bus_bandwidth(p, n, sec) / 1e9:.2f}")
                lines.append(f"| {setting} | {p} | {sim.human(n)} | " + " | ".join(cells) + " |")
    path = os.path.join(out, "busbw.md")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


# The ResNets of examples/resnet (f32 parameters, layers with parameters).
RESNETS = {"resnet20": (0.27e6 * 4, 20), "resnet50": (25.6e6 * 4, 161)}
FUSION_BYTES = {"default": 25 << 20, "one": 128 << 20, "off": 0}


def read_resnet_table(path):
    """Rows of bench/resnet_scaling.sh's table: {(model, batch, ranks, link, fusion): images/s}."""
    out = {}
    with open(path) as f:
        for line in f:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) < 6 or not cells[0].startswith("resnet"):
                continue
            out[(cells[0], int(cells[1]), int(cells[2]), cells[3], cells[4])] = float(cells[5])
    return out


def resnet_points(fit, table):
    """(label, measured efficiency, simulated efficiency) of every 2-rank row of `table`."""
    pts = []
    for (model, batch, ranks, link, fusion), ips in sorted(table.items()):
        one = table.get((model, batch, 1, "shm", "-"))
        if ranks != 2 or not one or model not in RESNETS:
            continue
        measured = ips / (2 * one)
        simulated = float("nan")
        if fit and link in fit:
            nbytes, layers = RESNETS[model]
            m = sim.Model(model, nbytes, batch / one, 2.0 / 3.0, layers)
            c = sim.cluster_of_row(fit[link]["constants"], {"ranks": 2, "hosts": 1 if link == "shm" else 2})
            simulated = sim.efficiency(c, m, FUSION_BYTES.get(fusion, 25 << 20))
        pts.append((f"{model.replace('resnet', 'R')} {link} {fusion}", measured, simulated))
    return pts


def plot_efficiency(plt, fit, measured, out, resnet=None):
    pts = resnet_points(fit, resnet) if resnet else []
    fig, axes = plt.subplots(1, 3 if pts else 2, figsize=(19 if pts else 13, 4.6))
    left, right = axes[0], axes[1]
    model = sim.Model("ResNet-50", 25.6e6 * 4, RESNET_STEP_S, 2.0 / 3.0, 161)
    ranks = [8 * 2 ** k for k in range(8)]
    for name, spec in CLUSTERS:
        effs = [sim.efficiency(cluster(spec, p), model, 64 << 20) for p in ranks]
        left.plot(ranks, effs, "-o", label=f"simulated: {name}", markersize=4)
    left.plot([512], [0.90], "k*", markersize=12, label="Horovod paper: ~90% at 512 GPUs")
    left.plot([8, 256], [1.0, 0.90], "kD--", markersize=6, label="Goyal et al.: ~90%, 8 -> 256 GPUs")
    left.set_xscale("log", base=2)
    left.set_xlabel("ranks (GPUs)")
    left.set_ylabel("scaling efficiency")
    left.set_ylim(0.5, 1.02)
    left.set_title(f"ResNet-50, {RESNET_STEP_S * 1e3:.0f} ms per step, 64 MiB fusion")
    left.grid(True, alpha=0.3)
    left.legend(fontsize=7, loc="lower left")
    # This machine: the MNIST convnet, measured and simulated from the fitted constants.
    mnist = sim.Model("MNIST convnet", MNIST_BYTES, MNIST_STEP_S, 2.0 / 3.0, 8)
    if fit and "shm" in fit:
        k = fit["shm"]["constants"]
        xs = [1, 2]  # (ranks beyond the 2 cores would share them with the compute too)
        ys = [sim.efficiency(sim.cluster_of_row(k, {"ranks": p, "hosts": 1}), mnist, 128 << 20) for p in xs]
        right.plot(xs, ys, "-o", label="simulated (fitted shared-memory constants)")
    if measured:
        xs = sorted(measured)
        right.plot(xs, [measured[x] for x in xs], "s", markersize=9, label="measured: HorovodTrainer, 1 thread/rank")
    right.set_xlabel("ranks")
    right.set_ylabel("scaling efficiency")
    right.set_ylim(0.5, 1.05)
    right.set_title("MNIST convnet on this machine (2 cores)")
    right.grid(True, alpha=0.3)
    right.legend(fontsize=8, loc="lower left")
    if pts:
        ax = axes[2]
        xs = list(range(len(pts)))
        ax.plot(xs, [p[1] for p in pts], "s", markersize=9, label="measured: HorovodTrainer, 2 ranks, 1 thread each")
        ax.plot(xs, [p[2] for p in pts], "o", markersize=7, label="simulated: fitted constants of the link")
        ax.set_xticks(xs)
        ax.set_xticklabels([p[0] for p in pts], rotation=60, ha="right", fontsize=7)
        ax.set_ylabel("scaling efficiency at 2 ranks")
        ax.set_ylim(0.5, 1.05)
        ax.set_title("ResNets on this machine (bench/resnet_scaling.sh)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="lower left")
    return save(plt, fig, out, "scaling_efficiency.png")


def plot_fit(plt, rows, fit, out):
    fig, ax = plt.subplots(figsize=(6.5, 5.5))
    lo, hi = float("inf"), 0.0
    for setting in sorted(fit):
        k = fit[setting]["constants"]
        pts = [(r["seconds"], sim.predict_row(k, r)) for r in sim.pool_rows(rows)
               if r["setting"] == setting and r["algorithm"] in sim.FORMULAS and r["bytes"] >= 1 << 20]
        if not pts:
            continue
        ax.plot([m for m, _ in pts], [p for _, p in pts], "o", markersize=3, label=setting)
        lo = min(lo, min(min(p) for p in pts))
        hi = max(hi, max(max(p) for p in pts))
    if hi > 0:
        ax.plot([lo, hi], [lo, hi], "k-", linewidth=0.8)
        ax.plot([lo, hi], [lo * 1.15, hi * 1.15], "k:", linewidth=0.8, label="+-15%")
        ax.plot([lo, hi], [lo / 1.15, hi / 1.15], "k:", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured seconds")
    ax.set_ylabel("predicted seconds")
    ax.set_title("allreduce: simulator vs measurement")
    ax.grid(True, alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return save(plt, fig, out, "predicted_vs_measured.png")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--csv", nargs="+", default=[])
    ap.add_argument("--report", help="a fit report (fit.txt) whose rows are fitted again (instead of --csv)")
    ap.add_argument("--fit")
    ap.add_argument("--measured", nargs="*", default=[], help="RANKS=EFFICIENCY of HorovodTrainer runs")
    ap.add_argument("--resnet", help="bench/resnet_scaling.sh's table (measured ResNet points)")
    ap.add_argument("--out", default=".")
    args = ap.parse_args(argv)
    if not args.csv and not args.report:
        ap.error("give --csv FILE... or --report fit.txt")
    import json
    from plotting import pyplot
    rows = sim.read_rows(args.csv) if args.csv else scaling_crossval.read_fit_report(args.report)
    fit = None
    if args.fit:
        with open(args.fit) as f:
            fit = json.load(f)
    elif args.report:
        # The calibration's fit (bench/calibrate_scaling.sh's arguments on this 2-core VM).
        with open(os.devnull, "w") as devnull:
            result = sim.fit_report(rows, out=devnull, cores=2, sizes=(1 << 20, 4 << 20, 16 << 20, 64 << 20),
                                    wire=("tcp-1gbit", "tcp-400mbit"), inside="tcp")
        fit = {s: {"constants": k} for s, (k, *_rest) in result.items()}
    resnet = read_resnet_table(args.resnet) if args.resnet else None
    measured = {1: 1.0}
    for m in args.measured:
        r, e = m.split("=")
        measured[int(r)] = float(e)
    plt = pyplot()
    os.makedirs(args.out, exist_ok=True)
    paths = [plot_efficiency(plt, fit, measured, args.out, resnet)]
    if args.csv:
        paths += [plot_busbw(plt, rows, args.out), busbw_table(rows, args.out)]
    if resnet:
        for label, m, p in resnet_points(fit, resnet):
            print(f"{label}: measured {m:.2f}, simulated {p:.2f}")
    if fit:
        paths.append(plot_fit(plt, rows, fit, args.out))
    for p in paths:
        print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
