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

Measured machines differ from a cluster of dedicated GPUs in ways the
calibration must model (`Link.cpu`, `Cluster.cores`, `Cluster.placement`,
`Link.betas`, `Link.beta_fixed`): on a CPU every byte a rank moves over
shared memory or kernel TCP is CPU work, so a step is stretched by the
number of its ranks at work on the busiest core (ranks bound to cores take
turns on theirs; which ranks share a core follows the binding: round-robin
by rank, or one core per host); a one-way transfer (a fold, a tree's
level) is half an exchange's CPU work (each side copies once); a TCP
link's bytes also spend time in the kernel that no rank's core is busy
for (`beta_fixed`: not stretched); the time per byte depends on whether
the allreduce's buffers fit the caches (a beta per size, `betas`,
interpolated in log size); a wire slower than the CPUs (a tc-shaped link)
is not stretched, and the flows through it at once share it.

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
  scaling_sim.py fit CSV... [--cores N] [--sizes 1M,4M,16M,64M] [--wire S,...] [--inside S]
                    [--min-bytes 1M] [--json OUT]
      fit alpha, beta (a beta per --sizes), beta_fixed, gamma per setting
      from bench/mpi_allreduce_bandwidth --csv rows (several runs pooled
      by median), the --wire settings as a wire between hosts with the
      --inside setting's link inside each host; print predicted vs
      measured for every configuration.
"""
import argparse
import csv
import json
import math
import sys
from dataclasses import dataclass, replace

ALGORITHMS = ("ring", "rd", "hd", "tree", "hier")


@dataclass
class Link:
    alpha: float  # seconds per message
    beta: float  # seconds per byte
    # Seconds per byte at each of Cluster.sizes (the allreduce's size: its
    # buffers in the caches or beyond them), interpolated in log size
    # between them; None: beta at every size.
    betas: tuple = None
    # False: a wire (a network or GPU link; a tc-shaped one): the flows
    # through it at once share it (Cluster.contention). True: the link's
    # time is CPU work (shared memory, TCP through the kernel with no
    # slower wire): each flow has its CPU, and ranks sharing a core
    # stretch it (Cluster.cores).
    cpu: bool = False
    # A CPU link's seconds per byte that ranks sharing a core do not
    # stretch (time its bytes spend where no rank's CPU works: the
    # kernel's queues and wakeups of a TCP link; 0 for a wire).
    beta_fixed: float = 0.0

    def time(self, nbytes, crowd=1.0, share=1):
        """One step of `nbytes` each way between partners (an exchange, or
        a ring's send to one and receive from the other) with `crowd` ranks
        at work on the busiest core (Cluster.crowding) and `share` flows
        through the link at once: a CPU-bound link is stretched by the
        crowding (every flow has its own CPU's work), a wire by the flows
        sharing it."""
        if self.cpu:
            return (self.alpha + nbytes * self.beta) * crowd + nbytes * self.beta_fixed
        return self.alpha + nbytes * self.beta * share

    def one_way(self, nbytes, crowd=1.0, share=1):
        """`nbytes` one way (a fold, a tree's level): on a CPU link each
        side copies once where an exchange copies twice (half the CPU
        work); a wire's time is the same (its directions are separate)."""
        if self.cpu:
            return (self.alpha + nbytes * self.beta / 2) * crowd + nbytes * self.beta_fixed
        return self.time(nbytes, crowd, share)

    def at_size(self, sizes, n):
        """This link for an allreduce of `n` bytes: beta from the curve."""
        if not self.betas or not sizes:
            return self
        return replace(self, beta=interpolate(sizes, self.betas, n), betas=None)


def interpolate(sizes, values, n):
    """values[i] at sizes[i], linear in log2(size) between them, the end
    values beyond the ends."""
    if n <= sizes[0]:
        return values[0]
    for i in range(1, len(sizes)):
        if n <= sizes[i]:
            t = (math.log2(n) - math.log2(sizes[i - 1])) / (math.log2(sizes[i]) - math.log2(sizes[i - 1]))
            return values[i - 1] * (1 - t) + values[i] * t
    return values[-1]


@dataclass
class Cluster:
    nodes: int
    per_node: int
    intra: Link
    inter: Link
    gamma: float  # seconds per byte reduced
    contention: bool = True  # flows through one node's network link share it
    # Cores the ranks share (0: every rank has its own core, the case of a
    # real cluster). Spire's collectives copy, reduce and poll on the CPU,
    # so a step's time is stretched by the number of ranks at work on the
    # busiest core (they take turns; ranks waiting yield theirs). Used to
    # model the calibration runs, where up to 8 ranks share one machine's
    # cores, bound to them (`placement`).
    cores: int = 0
    # Which core a rank is bound to: "rank": rank r on core r mod cores
    # (mpirun --map-by core --bind-to core); "host": every rank of node h
    # on core h mod cores (the test hosts pinned, one core each).
    placement: str = "rank"
    # Allreduce sizes at which the links' `betas` apply (() : none).
    sizes: tuple = ()

    def core_of(self, r):
        if self.placement == "host":
            return self.node_of(r) % self.cores
        return r % self.cores

    def crowding(self, active):
        """The ranks at work on the busiest core when the ranks `active`
        (an iterable of ranks, or a count of ranks 0..count-1) work at once."""
        if self.cores <= 0:
            return 1.0
        if isinstance(active, int):
            active = range(active)
        load = {}
        for r in active:
            core = self.core_of(r)
            load[core] = load.get(core, 0) + 1
        return float(max(1, max(load.values(), default=1)))

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
        worst = max(worst, link.time(nbytes, c.crowding(pow2_ranks), share))
    return worst


def fold_plan(c):
    """Which ranks fold when the rank count is not a power of two, as
    MpiCommunicator's plan_fold pairs them: the p ranks that take part (in
    the algorithm's order: node by node) and the (sender, receiver) pairs.
    Pairs are taken inside nodes where they can be (each from the node with
    the most ranks still taking part, the lower node on a tie; from the
    front of its ranks), then across nodes (the ranks left, node by node);
    the lower rank of a pair receives; the ranks that take part node by
    node keep the short-distance exchanges inside nodes where the nodes'
    counts allow. On one node: 2i+1 into 2i."""
    n = c.ranks
    p = 1 << log2_floor(n)
    nodes = {}
    for r in range(n):
        nodes.setdefault(c.node_of(r), []).append(r)
    groups = list(nodes.values())
    partner = [-1] * n
    nxt = [0] * len(groups)
    taking = [len(g) for g in groups]
    pairs = 0
    while pairs < n - p:
        best = None
        for h, g in enumerate(groups):
            if len(g) - nxt[h] >= 2 and (best is None or taking[h] > taking[best]):
                best = h
        if best is None:
            break
        a, b = groups[best][nxt[best]], groups[best][nxt[best] + 1]
        partner[a], partner[b] = b, a
        nxt[best] += 2
        taking[best] -= 1
        pairs += 1
    rest = [r for h, g in enumerate(groups) for r in g[nxt[h]:]]
    i = 0
    while pairs < n - p:
        a, b = rest[i], rest[i + 1]
        partner[a], partner[b] = b, a
        i += 2
        pairs += 1
    ranks = [r for g in groups for r in g if partner[r] < 0 or partner[r] > r]
    folds = [(r, partner[r]) for r in range(n) if 0 <= partner[r] < r]
    return ranks, folds


def _fold(c, n):
    """Ranks beyond the largest power of two p fold into a partner before
    (one send of n bytes, one reduction) and get the result after
    (fold_plan's pairs): the real ranks that then take part, and the fold's
    time."""
    ranks, folds = fold_plan(c)
    if not folds:
        return ranks, 0.0
    links = [c.link(a, b) for a, b in folds]
    crowd = c.crowding([r for pair in folds for r in pair])
    t = max(2 * l.one_way(n, crowd) for l in links) + n * c.gamma * crowd
    return ranks, t


def ring(c, n):
    p = c.ranks
    if p == 1:
        return 0.0
    crowd = c.crowding(p)
    step = max(c.link(r, (r + 1) % p).time(n / p, crowd) for r in range(p))
    return 2 * (p - 1) * step + (p - 1) / p * n * c.gamma * crowd


def rd(c, n):
    if c.ranks == 1:
        return 0.0
    ranks, t = _fold(c, n)
    p = len(ranks)
    d = 1
    while d < p:
        t += _exchange_step(c, ranks, d, n) + n * c.gamma * c.crowding(ranks)
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
        t += _exchange_step(c, ranks, d, part) + part * c.gamma * c.crowding(ranks)
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
        crowd = c.crowding([r for pair in pairs for r in pair])
        step = max(c.link(a, b).one_way(n, crowd) for a, b in pairs)
        t += 2 * step + n * c.gamma * crowd  # (the broadcast's level costs the same)
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
    crowd = c.crowding(c.ranks)
    if g > 1:
        inside = (g - 1) * c.intra.time(n / g, crowd)
        t += 2 * inside + (g - 1) / g * n * c.gamma * crowd
    if nodes > 1:
        shard = n / g
        share = g if c.contention else 1
        t += 2 * (nodes - 1) * c.inter.time(shard / nodes, crowd, share)
        t += (nodes - 1) / nodes * shard * c.gamma * crowd
    return t


FORMULAS = {"ring": ring, "rd": rd, "hd": hd, "tree": tree, "hier": hier}


def allreduce_time(c, algorithm, n):
    if c.sizes:
        # The ranks sharing a core share its caches: their buffers together
        # are the working set (n times the ranks on the busiest core).
        ws = n * c.crowding(c.ranks)
        c = replace(c, intra=c.intra.at_size(c.sizes, ws), inter=c.inter.at_size(c.sizes, ws))
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

def read_rows(paths, far=None):
    """Rows of bench/mpi_allreduce_bandwidth --csv: setting, ranks, hosts,
    bytes, algorithm, seconds (median). A row whose `kept` column is 0 was
    timed while the machine's cores were far apart throughout (the
    benchmark's core probe): left out, and appended to `far` if given."""
    rows = []
    for path in paths:
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                row = {"setting": r["setting"], "ranks": int(r["ranks"]), "hosts": int(r["hosts"]),
                       "bytes": int(r["bytes"]), "algorithm": r["algorithm"], "seconds": float(r["seconds"])}
                if r.get("kept") not in (None, "") and int(r["kept"]) == 0:
                    if far is not None:
                        far.append(row)
                    continue
                rows.append(row)
    return rows


def pool_rows(rows):
    """Several runs' rows of one configuration (setting, ranks, hosts,
    bytes, algorithm) pooled into one with their median time: one run on a
    shared machine is noisy."""
    groups = {}
    for r in rows:
        groups.setdefault((r["setting"], r["ranks"], r["hosts"], r["bytes"], r["algorithm"]), []).append(r["seconds"])
    out = []
    for (setting, ranks, hosts, n, algo), ts in groups.items():
        ts = sorted(ts)
        mid = len(ts) // 2
        med = ts[mid] if len(ts) % 2 else (ts[mid - 1] + ts[mid]) / 2
        out.append({"setting": setting, "ranks": ranks, "hosts": hosts, "bytes": n, "algorithm": algo,
                    "seconds": med, "runs": len(ts), "fastest": ts[0], "slowest": ts[-1]})
    return out


def cluster_of_row(constants, r):
    """The cluster a measured row ran on, with `constants` (a fit's): the
    row's hosts as nodes with the setting's link between them; inside a
    host the single-host setting's link when the fit has one ("intra": two
    links, and the flows leaving a host share its link), else the same
    link everywhere (one link, no contention); ranks sharing `cores` as
    `placement` binds them; betas at `sizes`."""
    k = constants

    def link_of(c):
        betas = c.get("betas")
        return Link(c["alpha"], c["beta"], tuple(betas) if betas else None, not c.get("wire", False),
                    c.get("beta_fixed") or 0.0)
    link = link_of(k)
    intra = k.get("intra")
    inner = link_of(intra) if intra else link
    return Cluster(r["hosts"], r["ranks"] // r["hosts"], inner, link, k["gamma"], contention=bool(intra),
                   cores=k.get("cores", 0), placement=k.get("placement", "rank"), sizes=tuple(k.get("sizes") or ()))


def predict_row(constants, r):
    return allreduce_time(cluster_of_row(constants, r), r["algorithm"], r["bytes"])


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


def _nnls(data):
    """x >= 0 minimising sum((row . x - 1)^2) over `data` (rows of
    coefficients divided by their target): every subset of free unknowns
    (the others 0) solved by least squares, the best non-negative kept."""
    k = len(data[0])
    best = None
    for mask in range(1, 1 << k):
        free = [i for i in range(k) if mask >> i & 1]
        ata = [[sum(x[i] * x[j] for x in data) for j in free] for i in free]
        atb = [sum(x[i] for x in data) for i in free]
        sol = _solve(ata, atb)
        if sol is None or any(v < 0 for v in sol):
            continue
        full = [0.0] * k
        for i, v in zip(free, sol):
            full[i] = v
        err = sum((sum(x[i] * full[i] for i in range(k)) - 1.0) ** 2 for x in data)
        if best is None or err < best[0]:
            best = (err, full)
    if best is None:
        raise ValueError("no non-negative fit")
    return best[1]


def fit_constants(rows, cores=0, sizes=(), intra=None, wire=False, placement="rank"):
    """The constants of one setting minimising the squared relative error of
    the simulator over `rows`: alpha, beta (betas: one per size of `sizes`,
    when given, for a CPU link), beta_fixed (a CPU link's time per byte
    that crowding does not stretch; fitted when `cores` is given), gamma,
    all >= 0; the rows ran with ranks
    sharing `cores` as `placement` binds them. `wire`: the setting's link
    is a wire slower than the CPUs (not stretched by ranks sharing cores:
    a tc-shaped link; one beta).

    One link (`intra` None): the time is linear in the constants, solved by
    non-negative least squares. Two links (`intra`: a single-host setting's
    fitted constants, e.g. shared memory on the same machine): its link
    inside each host and its gamma stay fixed and the link between hosts is
    fitted (a step's time is the max over its flows, not linear: least
    squares with the inside link free first, then a multiplicative
    coordinate search on the full model)."""
    rows = [r for r in rows if r["algorithm"] in FORMULAS]
    if not rows:
        raise ValueError("no rows of Spire's algorithms to fit")
    sizes = tuple(sizes) if (sizes and not wire) else ()
    base = {"cores": cores, "sizes": list(sizes), "wire": wire, "placement": placement}

    def at(r, fixed, **k):
        c = dict(base, alpha=0.0, beta=0.0, betas=None, gamma=0.0)
        c.update(fixed)
        c.update(k)
        return predict_row(c, r)

    def unit(i):
        e = [0.0] * len(sizes)
        e[i] = 1.0
        return e

    if intra is None:
        def coefficients(r):
            bs = [at(r, {}, betas=unit(i)) for i in range(len(sizes))] if sizes else [at(r, {}, beta=1.0)]
            fixed = [at(r, {}, beta_fixed=1.0)] if (cores and not wire) else []
            return [at(r, {}, alpha=1.0)] + bs + fixed + [at(r, {}, gamma=1.0)]
        x = _nnls([[v / r["seconds"] for v in coefficients(r)] for r in rows])
        nb = len(sizes) or 1
        betas = x[1:1 + nb]
        k = dict(base, alpha=x[0], beta=betas[0], betas=betas if sizes else None,
                 beta_fixed=x[1 + nb] if (cores and not wire) else 0.0, gamma=x[-1])
        return k

    inside = {key: intra.get(key) for key in ("alpha", "beta", "betas", "beta_fixed", "wire")}
    free_inside = {"intra": {"alpha": 0.0, "beta": 0.0, "betas": None, "beta_fixed": 0.0}}
    x = _nnls([[at(r, free_inside, alpha=1.0) / r["seconds"], at(r, free_inside, beta=1.0) / r["seconds"]]
               for r in rows])
    k = dict(base, alpha=x[0], beta=x[1], betas=None, gamma=intra["gamma"], intra=inside)

    def loss(c):
        return sum((predict_row(c, r) / r["seconds"] - 1.0) ** 2 for r in rows)

    # A constant the first solve left at 0 starts the search from a
    # thousandth of the fastest row's time (or bytes' time).
    fastest = min(rows, key=lambda r: r["seconds"])
    seed = {"alpha": 1e-3 * fastest["seconds"], "beta": 1e-3 * fastest["seconds"] / fastest["bytes"]}
    best = loss(k)
    for key in ("alpha", "beta"):
        if not k[key]:
            trial = dict(k, **{key: seed[key]})
            t = loss(trial)
            if t < best:
                best, k = t, trial
    for step in (4.0, 2.0, 1.4, 1.1, 1.02, 1.005):
        for _ in range(200):
            better = False
            for key in ("alpha", "beta"):
                for f in (step, 1.0 / step):
                    if not k[key]:
                        continue
                    trial = dict(k, **{key: k[key] * f})
                    t = loss(trial)
                    if t < best:
                        best, k, better = t, trial, True
            if not better:
                break
    return k


def fit_report(rows, min_bytes=1 << 20, out=sys.stdout, cores=0, sizes=(), wire=(), inside="tcp"):
    """Pools the runs, fits each setting's constants on its rows from
    `min_bytes` and prints predicted vs measured time of every
    configuration. A setting has one link (every rank pair alike: shared
    memory; TCP between hosts and inside them), except the `wire` settings
    (a wire between hosts, e.g. tc-shaped): two links, the setting
    `inside`'s link and reduction inside each host (fitted first). With
    `cores`, a setting's rows on one host had their ranks bound round-robin
    to the cores (placement "rank"), those on several hosts each host on a
    core of its own ("host": the test hosts pinned).
    Returns {setting: (constants, worst error from min_bytes, median
    error, rows within 15%, rows)}."""
    rows = pool_rows([r for r in rows if r["algorithm"] in FORMULAS])
    settings = sorted({r["setting"] for r in rows}, key=lambda s: (s in wire, s != inside, s))
    result = {}
    for setting in settings:
        mine = [r for r in rows if r["setting"] == setting]
        fit_rows = [r for r in mine if r["bytes"] >= min_bytes] or mine
        two = setting in wire and inside in result
        placement = "host" if any(r["hosts"] > 1 for r in mine) else "rank"
        k = fit_constants(fit_rows, cores, sizes, result[inside][0] if two else None, setting in wire, placement)

        def gbs(v):
            return f"{1e-9 / v:.2f} GB/s" if v else "inf"
        if k.get("betas"):
            bw = " / ".join(f"{1e-9 / v:.2f}" if v else "inf" for v in k["betas"])
            line = (f"setting {setting}: alpha {k['alpha'] * 1e6:.2f} us, beta {bw} GB/s at "
                    f"{' / '.join(human(n) for n in k['sizes'])}")
        else:
            line = f"setting {setting}: alpha {k['alpha'] * 1e6:.2f} us, beta {gbs(k['beta'])}"
        if k.get("beta_fixed"):
            line += f" + {gbs(k['beta_fixed'])} not stretched"
        line += f", reduction {gbs(k['gamma'])}"
        if k.get("intra"):
            line += f" (a wire between hosts; inside them {inside}'s link and reduction)"
        if cores:
            line += (f"; ranks share {cores} cores, " +
                     ("each host on one" if placement == "host" else "bound round-robin") +
                     (" (not the wire's time)" if k.get("wire") else ""))
        print(line, file=out)
        print(f"  {'ranks':>5} {'hosts':>5} {'algorithm':>9} {'size':>10} {'measured':>12} {'predicted':>12} {'error':>7}"
              f"  {'runs':>4} {'fastest / slowest run':>21}", file=out)
        errs = []
        spread = 0  # rows from min_bytes whose runs reach beyond 15% of their median
        for r in sorted(mine, key=lambda r: (r["ranks"], r["algorithm"], r["bytes"])):
            pred = predict_row(k, r)
            err = (pred - r["seconds"]) / r["seconds"]
            runs = ""
            if "fastest" in r:
                lo, hi = r["fastest"] / r["seconds"] - 1, r["slowest"] / r["seconds"] - 1
                runs = f"  {r['runs']:>4} {lo * 100:>9.1f}% / {hi * 100:>+6.1f}%"
                if r["bytes"] >= min_bytes and max(-lo, hi) > 0.15:
                    spread += 1
            if r["bytes"] >= min_bytes:
                errs.append(abs(err))
            print(f"  {r['ranks']:>5} {r['hosts']:>5} {r['algorithm']:>9} {r['bytes']:>10} "
                  f"{r['seconds'] * 1e6:>10.1f}us {pred * 1e6:>10.1f}us {err * 100:>6.1f}%{runs}", file=out)
        errs.sort()
        worst = errs[-1] if errs else 0.0
        median = errs[len(errs) // 2] if errs else 0.0
        within = sum(e <= 0.15 for e in errs)
        print(f"  from {human(min_bytes)}: {within} of {len(errs)} within 15%, median error {median * 100:.1f}%, "
              f"worst {worst * 100:.1f}%; {spread} rows with a run beyond 15% of their median", file=out)
        result[setting] = (k, worst, median, within, len(errs))
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
    far = []
    rows = read_rows(args.csv, far)
    if far:
        print(f"left out: {len(far)} rows timed while the cores were far apart throughout (kept 0)")
    result = fit_report(rows, parse_size(args.min_bytes), cores=args.cores,
                        sizes=tuple(parse_size(x) for x in args.sizes.split(",") if x),
                        wire=tuple(w for w in args.wire.split(",") if w), inside=args.inside)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({s: {"constants": k, "worst_error": w, "median_error": med, "within_15": n15, "rows": n}
                       for s, (k, w, med, n15, n) in result.items()}, f, indent=1)
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
    p.add_argument("--sizes", default="",
                   help="comma-separated allreduce sizes at which a CPU link's beta is fitted on its own, "
                        "interpolated in log size between them (the buffers in the caches and beyond), "
                        "e.g. 1M,4M,16M,64M (empty: one beta)")
    p.add_argument("--wire", default="",
                   help="comma-separated settings whose link between hosts is a wire slower than the CPUs "
                        "(tc-shaped): ranks sharing cores do not stretch it, flows through it share it; "
                        "inside the hosts the link of --inside")
    p.add_argument("--inside", default="tcp",
                   help="the setting whose link the --wire settings use inside their hosts (tcp: the "
                        "test hosts' ranks talk TCP inside a host too)")
    p.add_argument("--json")
    p = sub.add_parser("crossval", help="the fit's error on rows it did not see (leave one rank count or size out)")
    p.add_argument("data", nargs="+", help="CSV files of mpi_allreduce_bandwidth, or a fit report (fit.txt)")
    p.add_argument("--by", default="ranks,bytes", help="what to leave out: ranks, bytes or both (ranks,bytes)")
    p.add_argument("--min-bytes", default="1M")
    p.add_argument("--cores", type=int, default=0)
    p.add_argument("--sizes", default="")
    p.add_argument("--wire", default="")
    p.add_argument("--inside", default="tcp")
    args = ap.parse_args(argv)
    return {"allreduce": cmd_allreduce, "predict": cmd_predict, "fit": cmd_fit,
            "crossval": cmd_crossval}[args.cmd](args) or 0


def cmd_crossval(args):
    import scaling_crossval  # (it imports this module)
    return scaling_crossval.cmd_crossval(args)


if __name__ == "__main__":
    sys.exit(main())
