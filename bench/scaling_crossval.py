"""The scaling simulator's fit checked on rows it did not see, and a committed fit report
read back (bench/scaling_sim.py's `crossval` command runs cmd_crossval):

- read_fit_report: the measured rows of fit_report's text (bench/report/fit.txt), so a
  calibration can be fitted again without its CSV files (bench/plot_scaling.py --report);
- cross_validate: each rank count or size left out of the fit in turn and predicted by the
  constants fitted on the rest, beside the in-sample error.
"""
import scaling_sim as sim


def read_fit_report(path):
    """The measured rows of a fit report (fit_report's text, e.g. bench/report/fit.txt):
    setting, ranks, hosts, bytes, algorithm and the pooled median time, so a committed
    calibration can be fitted again without its CSV files."""
    rows, setting = [], None
    with open(path) as f:
        for line in f:
            if line.startswith("setting "):
                setting = line.split()[1].rstrip(":")
                continue
            parts = line.split()
            if setting and len(parts) >= 7 and parts[0].isdigit() and parts[4].endswith("us"):
                rows.append({"setting": setting, "ranks": int(parts[0]), "hosts": int(parts[1]),
                             "algorithm": parts[2], "bytes": int(parts[3]), "seconds": float(parts[4][:-2]) * 1e-6})
    return rows


def cross_validate(rows, by, min_bytes=1 << 20, cores=0, sizes=(), wire=(), inside="tcp"):
    """Leave-one-out error of the fit: for each setting and each value of `by` ("ranks" or
    "bytes") among its rows from `min_bytes`, the constants are fitted without the rows of that
    value and predict them (a size left out is no knot of the beta curve over `sizes`: its
    beta is interpolated from the neighbours'). Returns {setting: (in-sample errors,
    held-out errors)}, each a sorted list of |predicted - measured| / measured. A wire setting's inside link is the full
    fit's (fitted on the inside setting's own rows)."""
    rows = sim.pool_rows([r for r in rows if r["algorithm"] in sim.FORMULAS])
    settings = sorted({r["setting"] for r in rows}, key=lambda s: (s in wire, s != inside, s))
    full = {}
    out = {}
    for setting in settings:
        mine = [r for r in rows if r["setting"] == setting and r["bytes"] >= min_bytes]
        if not mine:
            continue
        two = setting in wire and inside in full
        placement = "host" if any(r["hosts"] > 1 for r in mine) else "rank"

        def fit(fit_rows, knots=sizes):
            return sim.fit_constants(fit_rows, cores, knots, full[inside] if two else None, setting in wire,
                                     placement)
        k = fit(mine)
        full[setting] = k
        inside_errs = sorted(abs(sim.predict_row(k, r) - r["seconds"]) / r["seconds"] for r in mine)
        held = []
        for v in sorted({r[by] for r in mine}):
            train = [r for r in mine if r[by] != v]
            test = [r for r in mine if r[by] == v]
            if not train:
                continue
            # (A size left out is no knot of the beta curve: its beta is interpolated.)
            kv = fit(train, tuple(x for x in sizes if not (by == "bytes" and x == v)))
            held += [abs(sim.predict_row(kv, r) - r["seconds"]) / r["seconds"] for r in test]
        out[setting] = (inside_errs, sorted(held))
    return out


def _summary(errs):
    if not errs:
        return "-"
    return (f"{sum(e <= 0.15 for e in errs)} of {len(errs)} within 15%, median {errs[len(errs) // 2] * 100:.1f}%, "
            f"worst {errs[-1] * 100:.1f}%")


def cmd_crossval(args):
    rows = []
    for path in args.data:
        rows += read_fit_report(path) if path.endswith(".txt") else sim.read_rows([path])
    sizes = tuple(sim.parse_size(x) for x in args.sizes.split(",") if x)
    wire = tuple(w for w in args.wire.split(",") if w)
    start = sim.human(sim.parse_size(args.min_bytes))
    for by in args.by.split(","):
        print(f"leave one {'rank count' if by == 'ranks' else 'size'} out (from {start}):")
        result = cross_validate(rows, by, sim.parse_size(args.min_bytes), args.cores, sizes, wire, args.inside)
        for setting, (ins, held) in result.items():
            print(f"  {setting}: in-sample {_summary(ins)}; held out {_summary(held)}")
    return 0
