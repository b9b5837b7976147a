#!/usr/bin/env python3
"""Spire's scaling simulator: allreduce and data-parallel training step times
from an alpha-beta-gamma model, 2 to 1024 ranks and beyond.

A cluster is `nodes` nodes of `per_node` ranks; links inside a node and
between nodes have their own latency (alpha, seconds per message) and time
per byte (beta); gamma is the time per byte reduced. The allreduce
algorithms are those of ../shared/docs/allreduce-facts.md ("Costs"), placed
on the cluster: a step between ranks of one node uses the intra-node link,
a step across nodes the inter-node one (ranks are numbered node by node), a
step that sends several ranks' flows through one node's network link at
once shares its bandwidth (`contention`; off, every formula is the textbook
one exactly):

- ring: 2(p-1) steps of n/p bytes (each bounded by the slowest link of
  the ring) + (p-1)/p n gamma;
- rd (recursive doubling): log2(p) exchanges of n bytes + log2(p) n gamma
  (ranks beyond a power of two fold in: 2 more full steps and one reduction);
- hd (halving-doubling, Rabenseifner): reduce-scatter by recursive halving
  with the partner distance doubling from 1, allgather back: 2 log2(p)
  steps moving 2(p-1)/p n bytes + (p-1)/p n gamma;
- tree: binomial reduce then broadcast: 2 log2(p) (alpha + n beta) +
  log2(p) n gamma;
- hier (Horovod's hierarchical): ring reduce-scatter inside each node,
  ring allreduce of each rank's shard across nodes (the node's ranks
  in parallel, sharing its network link), ring allgather inside the node.

A training step (`step_time`) runs the forward and backward pass of one
rank, the gradients (`model_bytes`) becoming ready uniformly over the
backward pass in reverse layer order, packed into buckets of
`fusion_bytes` (Horovod's tensor fusion); a bucket's allreduce starts when
its last gradient exists and the previous bucket's allreduce is done
(one communication stream), overlapping the rest of the backward pass.

Commands:
  scaling_sim.py allreduce --ranks 8 --per-node 8 --bytes 64M [cluster options]
  scaling_sim.py predict [cluster options]      ResNet-50 scaling 8..1024 ranks,
                                                the ring's crossover sizes
  scaling_sim.py fit CSV... [--cores N] [--min-bytes 1M] [--json OUT]
      fit alpha, beta, gamma per setting from bench/mpi_allreduce_bandwidth
      --csv rows and print predicted vs measured for every configuration.
"""
import argparse
import csv
import json
import math
import sys
from dataclasses import dataclass, field, asdict

ALGORITHMS = ("ring", "rd", "hd", "tree", "hier")


@dataclass
class Link:
    alpha: float  # seconds per message
    beta: float  # seconds per byte


@dataclass
class Cluster:
    nodes: int
    per_node: int
    intra: Link
    inter: Link
    gamma: float  # seconds per byte reduced
    contention: bool = True  # flows through one node's network link share it

    @property
    def ranks(self):
        return self.nodes * self.per_node

    def node_of(self, r):
        return r // self.per_node

    def link(self, a, b):
        return self.intra if self.node_of(a) == self.node_of(b) else self.inter


def log2_floor(p):
    return p.bit_length() - 1


def _exchange_step(c, pow2_ranks, distance, nbytes):
    """One pairwise-exchange step among `pow2_ranks` (real ranks) at partner
    distance `distance` (in that list), every pair sending `nbytes`: the
    slowest pair's time, with the flows that leave one node sharing its
    network link when contention is on."""
    worst = 0.0
    crossing = {}
    for i, r in enumerate(pow2_ranks):
        q = pow2_ranks[i ^ distance]
        if c.node_of(r) != c.node_of(q):
            crossing[c.node_of(r)] = crossing.get(c.node_of(r), 0) + 1
    for i, r in enumerate(pow2_ranks):
        q = pow2_ranks[i ^ distance]
        link = c.link(r, q)
        share = crossing.get(c.node_of(r), 1) if (link is c.inter and c.contention) else 1
        worst = max(worst, link.alpha + nbytes * link.beta * share)
    return worst


def _fold(c, n):
    """Ranks beyond the largest power of two p fold into a partner before
    (one send of n bytes, one reduction) and get the result after: the real
    ranks that then take part, and the fold's time."""
    p = 1 << log2_floor(c.ranks)
    extra = c.ranks - p
    ranks = [2 * v if v < extra else v + extra for v in range(p)]
    if extra == 0:
        return ranks, 0.0
    links = [c.link(2 * i, 2 * i + 1) for i in range(extra)]
    t = max(2 * (l.alpha + n * l.beta) for l in links) + n * c.gamma
    return ranks, t


def ring(c, n):
    p = c.ranks
    if p == 1:
        return 0.0
    step = max(c.link(r, (r + 1) % p).alpha + n / p * c.link(r, (r + 1) % p).beta for r in range(p))
    return 2 * (p - 1) * step + (p - 1) / p * n * c.gamma


def rd(c, n):
    if c.ranks == 1:
        return 0.0
    ranks, t = _fold(c, n)
    p = len(ranks)
    d = 1
    while d < p:
        t += _exchange_step(c, ranks, d, n) + n * c.gamma
        d *= 2
    return t


def hd(c, n):
    if c.ranks == 1:
        return 0.0
    ranks, t = _fold(c, n)
    p = len(ranks)
    d, part = 1, n
    while d < p:  # reduce-scatter: distance doubling, halves shrinking
        part /= 2
        t += _exchange_step(c, ranks, d, part) + part * c.gamma
        d *= 2
    while d > 1:  # allgather: the reverse
        d //= 2
        t += _exchange_step(c, ranks, d, part)
        part *= 2
    return t


def tree(c, n):
    """Binomial reduce to rank 0 then binomial broadcast, whole messages."""
    if c.ranks == 1:
        return 0.0
    p = c.ranks
    t = 0.0
    d = 1
    while d < p:
        # Level d: rank r (r % 2d == d) sends to r - d; the slowest pair.
        pairs = [(r, r - d) for r in range(d, p, 2 * d)]
        step = max(c.link(a, b).alpha + n * c.link(a, b).beta for a, b in pairs)
        t += 2 * step + n * c.gamma  # (the broadcast's level costs the same)
        d *= 2
    return t


def hier(c, n):
    """Reduce-scatter (ring) inside each node, allreduce of the shards across
    nodes (ring; a node's ranks in parallel through its one network link),
    allgather (ring) inside the node."""
    g, nodes = c.per_node, c.nodes
    if c.ranks == 1:
        return 0.0
    t = 0.0
    if g > 1:
        inside = (g - 1) * (c.intra.alpha + n / g * c.intra.beta)
        t += 2 * inside + (g - 1) / g * n * c.gamma
    if nodes > 1:
        shard = n / g
        share = g if c.contention else 1
        t += 2 * (nodes - 1) * (c.inter.alpha + shard / nodes * c.inter.beta * share)
        t += (nodes - 1) / nodes * shard * c.gamma
    return t


FORMULAS = {"ring": ring, "rd": rd, "hd": hd, "tree": tree, "hier": hier}


def allreduce_time(c, algorithm, n):
    return FORMULAS[algorithm](c, float(n))


def best_algorithm(c, n, algorithms=ALGORITHMS):
    return min(algorithms, key=lambda a: allreduce_time(c, a, n))


def bus_bandwidth(p, n, seconds):
    """nccl-tests' busbw of an allreduce: n/t x 2(p-1)/p (bytes/s)."""
    return n / seconds * 2 * (p - 1) / p if seconds > 0 else float("inf")


@dataclass
class Model:
    """A data-parallel model: gradient bytes, one rank's step compute time
    (forward + backward; the backward is `backward_share` of it)."""
    name: str
    model_bytes: float
    compute_s: float
    backward_share: float = 2.0 / 3.0
    layers: int = 160


def step_time(c, m, fusion_bytes, algorithm="auto"):
    """One training step's time with bucketed allreduce overlapping the
    backward pass: (step seconds, communication seconds not hidden)."""
    forward = m.compute_s * (1 - m.backward_share)
    backward = m.compute_s * m.backward_share
    if c.ranks == 1:
        return m.compute_s, 0.0
    per_layer = m.model_bytes / m.layers
    # Buckets in backward order: (ready time, bytes).
    buckets, size, ready = [], 0.0, forward
    for k in range(m.layers):
        size += per_layer
        ready = forward + backward * (k + 1) / m.layers
        if size >= fusion_bytes or k == m.layers - 1:
            buckets.append((ready, size))
            size = 0.0
    free = 0.0  # when the communication stream is next free
    for ready_at, nbytes in buckets:
        algo = best_algorithm(c, nbytes) if algorithm == "auto" else algorithm
        free = max(free, ready_at) + allreduce_time(c, algo, nbytes)
    end = max(m.compute_s, free)
    return end, end - m.compute_s


def efficiency(c, m, fusion_bytes, algorithm="auto"):
    t, _ = step_time(c, m, fusion_bytes, algorithm)
    return m.compute_s / t


def ring_crossover(c, lo=1 << 10, hi=1 << 34, algorithms=ALGORITHMS):
    """The smallest power-of-two size from which the ring is the fastest of
    `algorithms` at every larger power of two up to `hi` (None if never)."""
    sizes = []
    s = lo
    while s <= hi:
        sizes.append(s)
        s *= 2
    winners = [best_algorithm(c, s, algorithms) == "ring" for s in sizes]
    for i in range(len(sizes)):
        if all(winners[i:]):
            return sizes[i]
    return None


# ---- Calibration -----------------------------------------------------------------

def read_rows(paths):
    """Rows of bench/mpi_allreduce_bandwidth --csv: setting, ranks, hosts,
    bytes, algorithm, seconds (median)."""
    rows = []
    for path in paths:
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                rows.append({"setting": r["setting"], "ranks": int(r["ranks"]), "hosts": int(r["hosts"]),
                             "bytes": int(r["bytes"]), "algorithm": r["algorithm"],
                             "seconds": float(r["seconds"])})
    return rows


def _coefficients(ranks, hosts, algorithm, n, cores=0):
    """The time of `algorithm` is a*alpha + b*beta + g*gamma on a flat
    cluster of `ranks` with one link (alpha, beta): the coefficients, found
    by evaluating the formula at unit constants. With `cores` > 0, the
    ranks of the measurement shared that many cores: every term is
    stretched by ranks/cores when that is above 1 (each rank had that
    share of a core for its copies, reductions and polling)."""
    share = max(1.0, ranks / cores) if cores > 0 else 1.0

    def at(alpha, beta, gamma):
        # (One kind of link without contention: where the hosts split the
        # ranks makes no difference, so they are one node here.)
        link = Link(alpha, beta)
        return share * allreduce_time(Cluster(1, ranks, link, link, gamma, contention=False), algorithm, n)

    return at(1, 0, 0), at(0, 1, 0), at(0, 0, 1)


def _solve(a, b):
    """Solves the square system a x = b (Gaussian elimination with partial
    pivoting); None when it is singular (a pivot below 1e-12 of the
    matrix's largest entry)."""
    k = len(b)
    m = [list(a[i]) + [b[i]] for i in range(k)]
    scale = max((abs(v) for row in a for v in row), default=0.0)
    for col in range(k):
        piv = max(range(col, k), key=lambda r: abs(m[r][col]))
        if abs(m[piv][col]) <= 1e-12 * scale:
            return None
        m[col], m[piv] = m[piv], m[col]
        for r in range(k):
            if r != col:
                f = m[r][col] / m[col][col]
                for j in range(col, k + 1):
                    m[r][j] -= f * m[col][j]
    return [m[i][k] / m[i][i] for i in range(k)]


def fit_constants(rows, cores=0):
    """alpha, beta, gamma >= 0 minimising the squared relative error of the
    formulas over `rows` (all of one setting; `cores` as in _coefficients):
    non-negative least squares by trying every subset of free constants
    (the others 0)."""
    data = []
    for r in rows:
        if r["algorithm"] not in FORMULAS:
            continue
        coef = _coefficients(r["ranks"], r["hosts"], r["algorithm"], r["bytes"], cores)
        data.append([c / r["seconds"] for c in coef])  # relative: each row's target is 1
    if not data:
        raise ValueError("no rows of Spire's algorithms to fit")
    best = None
    for mask in range(1, 8):
        free = [i for i in range(3) if mask >> i & 1]
        ata = [[sum(x[i] * x[j] for x in data) for j in free] for i in free]
        atb = [sum(x[i] for x in data) for i in free]
        sol = _solve(ata, atb)
        if sol is None or any(v < 0 for v in sol):
            continue
        full = [0.0, 0.0, 0.0]
        for i, v in zip(free, sol):
            full[i] = v
        err = sum((sum(x[i] * full[i] for i in range(3)) - 1.0) ** 2 for x in data)
        if best is None or err < best[0]:
            best = (err, full)
    if best is None:
        raise ValueError("no non-negative fit")
    alpha, beta, gamma = best[1]
    return {"alpha": alpha, "beta": beta, "gamma": gamma, "cores": cores}


def predict_row(constants, r):
    a, b, g = _coefficients(r["ranks"], r["hosts"], r["algorithm"], r["bytes"], constants.get("cores", 0))
    return a * constants["alpha"] + b * constants["beta"] + g * constants["gamma"]


def fit_report(rows, min_bytes=1 << 20, out=sys.stdout, cores=0):
    """Fits each setting's constants and prints predicted vs measured time of
    every configuration; returns {setting: (constants, worst error from
    min_bytes)}."""
    result = {}
    for setting in sorted({r["setting"] for r in rows}):
        mine = [r for r in rows if r["setting"] == setting and r["algorithm"] in FORMULAS]
        k = fit_constants(mine, cores)
        print(f"setting {setting}: alpha {k['alpha'] * 1e6:.2f} us, beta {1e-9 / k['beta'] if k['beta'] else float('inf'):.2f} GB/s, "
              f"reduction {1e-9 / k['gamma'] if k['gamma'] else float('inf'):.2f} GB/s", file=out)
        print(f"  {'ranks':>5} {'hosts':>5} {'algorithm':>9} {'size':>10} {'measured':>12} {'predicted':>12} {'error':>7}", file=out)
        worst = 0.0
        for r in sorted(mine, key=lambda r: (r["ranks"], r["algorithm"], r["bytes"])):
            pred = predict_row(k, r)
            err = (pred - r["seconds"]) / r["seconds"]
            if r["bytes"] >= min_bytes:
                worst = max(worst, abs(err))
            print(f"  {r['ranks']:>5} {r['hosts']:>5} {r['algorithm']:>9} {r['bytes']:>10} "
                  f"{r['seconds'] * 1e6:>10.1f}us {pred * 1e6:>10.1f}us {err * 100:>6.1f}%", file=out)
        print(f"  worst error from {min_bytes} bytes: {worst * 100:.1f}%", file=out)
        result[setting] = (k, worst)
    return result


# ---- Command line ------------------------------------------------------------------

def human(n):
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return f"{n / k:.3g} {unit}"
    return f"{n:.0f} B"


def parse_size(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if s[-1] in units:
        return int(float(s[:-1]) * units[s[-1]])
    return int(s)


def cluster_from_args(args, ranks):
    per = min(args.per_node, ranks)
    if ranks % per:
        raise SystemExit(f"scaling_sim: {ranks} ranks do not fill nodes of {per} (--per-node)")
    nodes = ranks // per
    return Cluster(nodes, per, Link(args.intra_alpha, 1 / args.intra_bw), Link(args.inter_alpha, 8 / args.inter_gbit / 1e9),
                   1 / args.reduce_bw, contention=not args.no_contention)


def add_cluster_args(p):
    p.add_argument("--per-node", type=int, default=8, help="ranks (GPUs) per node (8)")
    p.add_argument("--intra-alpha", type=float, default=3e-6, help="intra-node latency, s (3e-6: NVLink class)")
    p.add_argument("--intra-bw", type=float, default=150e9, help="intra-node bytes/s per rank (150e9: NVLink class)")
    p.add_argument("--inter-alpha", type=float, default=10e-6, help="inter-node latency, s (10e-6)")
    p.add_argument("--inter-gbit", type=float, default=100, help="inter-node link per node, Gbit/s (100)")
    p.add_argument("--reduce-bw", type=float, default=500e9, help="reduction bytes/s on a GPU (500e9)")
    p.add_argument("--no-contention", action="store_true", help="flows through one network link do not share it")


def describe(args):
    return (f"{args.per_node} ranks per node; intra-node alpha {args.intra_alpha * 1e6:g} us, "
            f"{args.intra_bw / 1e9:g} GB/s; inter-node alpha {args.inter_alpha * 1e6:g} us, "
            f"{args.inter_gbit:g} Gbit/s per node; reduction {args.reduce_bw / 1e9:g} GB/s"
            f"{'' if not args.no_contention else '; no contention'}")


RESNET50 = Model("ResNet-50 (25.6 M f32 parameters)", 25.6e6 * 4, 0.0, 2.0 / 3.0, 161)


def cmd_predict(args):
    m = Model(RESNET50.name, RESNET50.model_bytes, args.compute_ms / 1e3, RESNET50.backward_share, RESNET50.layers)
    fusion = parse_size(args.fusion)
    print(f"cluster: {describe(args)}")
    print(f"model: {m.name}, one rank's step {args.compute_ms:g} ms (forward + backward), fusion {fusion} bytes")
    print(f"{'ranks':>6} {'algorithm':>9} {'step ms':>9} {'exposed ms':>11} {'efficiency':>10}")
    ranks = 8
    while ranks <= args.max_ranks:
        c = cluster_from_args(args, ranks)
        for algo in ("auto", "ring", "hier"):
            t, exposed = step_time(c, m, fusion, algo)
            print(f"{ranks:>6} {algo:>9} {t * 1e3:>9.1f} {exposed * 1e3:>11.1f} {m.compute_s / t:>10.3f}")
        ranks *= 2
    print()
    # (Halving-doubling moves the ring's bytes in fewer steps: in this model
    # it is never slower than the ring on a power of two, so the crossover
    # is the ring's against the latency-bound algorithms, as in
    # allreduce-facts.md's n*.)
    print("size from which the ring beats recursive doubling and the binomial tree"
          " (n*: the closed form on one flat link of the inter-node constants, no reduction cost):")
    ranks = 2
    while ranks <= args.max_ranks:
        c = cluster_from_args(args, ranks)
        x = ring_crossover(c, algorithms=("ring", "rd", "tree"))
        lg = math.log2(ranks)
        denom = lg - 2 * (ranks - 1) / ranks
        nstar = (c.inter.alpha / c.inter.beta) * (2 * (ranks - 1) - lg) / denom if denom > 0 else None
        print(f"{ranks:>6} ranks: {'never up to 16 GiB' if x is None else human(x):>10}"
              f"   n* {'-' if nstar is None else human(nstar)}")
        ranks *= 2


def cmd_allreduce(args):
    c = cluster_from_args(args, args.ranks)
    n = parse_size(args.bytes)
    print(f"cluster: {c.nodes} x {c.per_node} ranks; {describe(args)}")
    for a in ALGORITHMS:
        t = allreduce_time(c, a, n)
        print(f"{a:>5}: {t * 1e6:12.1f} us  busbw {bus_bandwidth(c.ranks, n, t) / 1e9:8.2f} GB/s")


def cmd_fit(args):
    rows = read_rows(args.csv)
    result = fit_report(rows, parse_size(args.min_bytes), cores=args.cores)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({s: {"constants": k, "worst_error": w} for s, (k, w) in result.items()}, f, indent=1)
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("allreduce", help="every algorithm's time for one size")
    p.add_argument("--ranks", type=int, required=True)
    p.add_argument("--bytes", required=True)
    add_cluster_args(p)
    p = sub.add_parser("predict", help="ResNet-50 scaling efficiency and the ring's crossover")
    p.add_argument("--compute-ms", type=float, default=200.0,
                   help="one rank's forward+backward time (200 ms: ResNet-50, batch 64 on a V100-class GPU)")
    p.add_argument("--fusion", default="64M", help="fusion threshold (64M)")
    p.add_argument("--max-ranks", type=int, default=1024)
    add_cluster_args(p)
    p = sub.add_parser("fit", help="fit constants to measured runs")
    p.add_argument("csv", nargs="+")
    p.add_argument("--min-bytes", default="1M")
    p.add_argument("--cores", type=int, default=0,
                   help="cores the measured ranks shared (0: each rank had its own)")
    p.add_argument("--json")
    args = ap.parse_args(argv)
    return {"allreduce": cmd_allreduce, "predict": cmd_predict, "fit": cmd_fit}[args.cmd](args) or 0


if __name__ == "__main__":
    sys.exit(main())
