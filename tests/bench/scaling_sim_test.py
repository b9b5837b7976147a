#!/usr/bin/env python3
"""Tests of bench/scaling_sim.py (ctest runs this): with contention off and
one kind of link, every allreduce formula is the textbook one of
../shared/docs/allreduce-facts.md exactly; placement on nodes, folding of
ranks beyond a power of two and link sharing behave as documented; the fit
recovers known constants from rows the model made (ranks sharing cores,
a beta curve over the sizes, a wire between hosts beside a CPU-bound
link inside them, runs pooled by median); the training step's
overlap is what a hand computation gives; the ring's crossover with
recursive doubling matches the closed form."""
import math
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import scaling_sim as sim  # noqa: E402
import scaling_crossval  # noqa: E402

A, B, G = 5e-6, 1e-10, 3e-11


def flat(p, per_node=None, contention=False, a=A, b=B, g=G, cpu=False, cores=0):
    per = per_node or p
    link = sim.Link(a, b, cpu=cpu)
    return sim.Cluster(p // per, per, link, link, g, contention=contention, cores=cores)


def close(x, y, rel=1e-12):
    return abs(x - y) <= rel * max(abs(x), abs(y))


class Formulas(unittest.TestCase):
    def test_textbook_costs_on_powers_of_two(self):
        for p in (2, 4, 8, 16, 64):
            for n in (1000.0, 12345678.0):
                c = flat(p)
                l = math.log2(p)
                self.assertTrue(close(sim.allreduce_time(c, "ring", n),
                                      2 * (p - 1) * A + 2 * (p - 1) / p * n * B + (p - 1) / p * n * G), p)
                self.assertTrue(close(sim.allreduce_time(c, "rd", n), l * (A + n * B + n * G)), p)
                self.assertTrue(close(sim.allreduce_time(c, "hd", n),
                                      2 * l * A + 2 * (p - 1) / p * n * B + (p - 1) / p * n * G), p)
                self.assertTrue(close(sim.allreduce_time(c, "tree", n), 2 * l * (A + n * B) + l * n * G), p)
                # One node: the hierarchical scheme is the ring.
                self.assertTrue(close(sim.allreduce_time(c, "hier", n), sim.allreduce_time(c, "ring", n)), p)

    def test_folding_beyond_a_power_of_two(self):
        n = 1e6
        fold = 2 * (A + n * B) + n * G
        self.assertTrue(close(sim.allreduce_time(flat(6), "rd", n), fold + sim.allreduce_time(flat(4), "rd", n)))
        self.assertTrue(close(sim.allreduce_time(flat(5), "hd", n), fold + sim.allreduce_time(flat(4), "hd", n)))
        self.assertEqual(sim.allreduce_time(flat(1), "ring", n), 0.0)

    def test_folds_pair_ranks_inside_nodes(self):
        # As MpiCommunicator's plan_fold (tests/dist/mpi: TheFoldPairsRanksInsideHosts).
        self.assertEqual(sim.fold_plan(flat(6)), ([0, 2, 4, 5], [(1, 0), (3, 2)]))
        self.assertEqual(sim.fold_plan(flat(6, per_node=3)), ([0, 2, 3, 5], [(1, 0), (4, 3)]))
        self.assertEqual(sim.fold_plan(flat(10, per_node=5)), ([0, 2, 3, 4, 5, 7, 8, 9], [(1, 0), (6, 5)]))
        self.assertEqual(sim.fold_plan(flat(3, per_node=1)), ([0, 2], [(1, 0)]))
        self.assertEqual(sim.fold_plan(flat(8, per_node=2)), (list(range(8)), []))
        # 2 nodes x 3 over a slow wire: the folds and the first exchange stay inside
        # the nodes; only the last exchange crosses, two flows through each node's link.
        fast, slow = sim.Link(1e-6, 1e-11), sim.Link(1e-5, 1e-9)
        c = sim.Cluster(2, 3, fast, slow, G, contention=True)
        n = 1e6
        want = 2 * (fast.alpha + n * fast.beta) + n * G + (fast.alpha + n * fast.beta) + n * G + \
            (slow.alpha + 2 * n * slow.beta) + n * G
        self.assertTrue(close(sim.allreduce_time(c, "rd", n), want))

    def test_placement_uses_the_inter_node_link_across_nodes(self):
        fast, slow = sim.Link(1e-6, 1e-11), sim.Link(1e-5, 1e-9)
        c = sim.Cluster(2, 4, fast, slow, 0.0, contention=False)
        n = 8e6
        # Ring of 8 over 2 nodes: every step waits for a crossing link.
        self.assertTrue(close(sim.allreduce_time(c, "ring", n), 14 * (slow.alpha + n / 8 * slow.beta)))
        # Halving-doubling, distance 1, 2 on a node, 4 across: the smallest parts cross.
        want = (2 * (fast.alpha + n / 2 * fast.beta) + 2 * (fast.alpha + n / 4 * fast.beta)
                + 2 * (slow.alpha + n / 8 * slow.beta))
        self.assertTrue(close(sim.allreduce_time(c, "hd", n), want))
        # With contention the 4 ranks of a node share its link at the crossing step.
        cc = sim.Cluster(2, 4, fast, slow, 0.0, contention=True)
        want_c = want - 2 * (n / 8 * slow.beta) + 2 * (n / 8 * slow.beta * 4)
        self.assertTrue(close(sim.allreduce_time(cc, "hd", n), want_c))
        # Hierarchical: ring inside (4), ring of shards across (2 nodes), shared by the node's 4 ranks.
        want_h = 2 * 3 * (fast.alpha + n / 4 * fast.beta) + 2 * 1 * (slow.alpha + n / 4 / 2 * slow.beta * 4)
        self.assertTrue(close(sim.allreduce_time(cc, "hier", n), want_h))

    def test_ring_crossover_with_recursive_doubling(self):
        # allreduce-facts.md: n* = (a/b)(2(p-1) - log2 p)/(log2 p - 2(p-1)/p), no reduction cost.
        for p in (8, 64, 1024):
            c = flat(p, g=0.0)
            l = math.log2(p)
            nstar = (A / B) * (2 * (p - 1) - l) / (l - 2 * (p - 1) / p)
            x = sim.ring_crossover(c, algorithms=("ring", "rd"))
            self.assertIsNotNone(x)
            self.assertGreaterEqual(x, nstar, p)
            self.assertLess(x, 2 * nstar, p)


class TrainingStep(unittest.TestCase):
    def test_one_bucket_waits_for_the_whole_backward_pass(self):
        m = sim.Model("m", 4e6, 0.3, 2.0 / 3.0, 10)
        c = flat(4)
        t, exposed = sim.step_time(c, m, fusion_bytes=1e9, algorithm="ring")
        self.assertTrue(close(t, 0.3 + sim.allreduce_time(c, "ring", 4e6)))
        self.assertTrue(close(exposed, t - 0.3))

    def test_small_buckets_overlap_the_backward_pass(self):
        m = sim.Model("m", 4e6, 0.3, 2.0 / 3.0, 10)
        c = flat(4)
        # 10 buckets of 0.4 MB, one every 20 ms of backward; each takes far less.
        t, exposed = sim.step_time(c, m, fusion_bytes=4e5, algorithm="ring")
        last = sim.allreduce_time(c, "ring", 4e5)
        self.assertLess(last, 0.02)
        self.assertTrue(close(t, 0.3 + last))
        # Free links: perfect efficiency; one rank: no communication.
        free = flat(4, a=0.0, b=0.0, g=0.0)
        self.assertEqual(sim.efficiency(free, m, 4e5), 1.0)
        self.assertEqual(sim.step_time(flat(1), m, 4e5), (0.3, 0.0))


class Fit(unittest.TestCase):
    def test_recovers_the_constants_that_made_the_rows(self):
        rows = []
        for p, hosts in ((2, 1), (4, 1), (4, 2), (8, 2), (3, 1)):
            for algo in ("ring", "rd", "hd"):
                for n in (4096, 65536, 1 << 20, 1 << 24):
                    c = flat(p, per_node=p // hosts, cpu=True)  # (a measured setting's link is the CPU's)
                    rows.append({"setting": "s", "ranks": p, "hosts": hosts, "bytes": n, "algorithm": algo,
                                 "seconds": sim.allreduce_time(c, algo, n)})
        rows.append({"setting": "s", "ranks": 2, "hosts": 1, "bytes": 4096, "algorithm": "mpi", "seconds": 1.0})
        k = sim.fit_constants(rows)
        self.assertTrue(close(k["alpha"], A, 1e-6), k)
        self.assertTrue(close(k["beta"], B, 1e-6), k)
        self.assertTrue(close(k["gamma"], G, 1e-6), k)
        with open(os.devnull, "w") as devnull:
            report = sim.fit_report(rows, out=devnull)
        self.assertLess(report["s"][1], 1e-6)

    def test_held_out_rows_and_the_report_round_trip(self):
        # Rows made by the model itself: every row left out is predicted exactly from the
        # others; one distorted rank count is predicted badly when held out (its own rows
        # no longer pull the constants), and the fit report reads back as the same rows.
        rows = []
        for p, hosts in ((2, 1), (4, 1), (4, 2), (8, 2)):
            for algo in ("ring", "rd", "hd"):
                for n in (1 << 20, 1 << 22, 1 << 24):
                    c = flat(p, per_node=p // hosts, cpu=True)
                    rows.append({"setting": "s", "ranks": p, "hosts": hosts, "bytes": n, "algorithm": algo,
                                 "seconds": sim.allreduce_time(c, algo, n)})
        for by in ("ranks", "bytes"):
            ins, held = scaling_crossval.cross_validate(rows, by)["s"]
            self.assertEqual(len(ins), len(rows))
            self.assertEqual(len(held), len(rows))
            self.assertLess(held[-1], 1e-6, by)
        skewed = [dict(r, seconds=r["seconds"] * (1.6 if r["ranks"] == 8 else 1.0)) for r in rows]
        ins, held = scaling_crossval.cross_validate(skewed, "ranks")["s"]
        self.assertGreater(held[-1], ins[-1])
        self.assertGreater(held[-1], 0.3)
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            sim.fit_report(rows, out=f)
        try:
            back = scaling_crossval.read_fit_report(f.name)
        finally:
            os.unlink(f.name)
        key = lambda r: (r["ranks"], r["hosts"], r["algorithm"], r["bytes"])  # noqa: E731
        self.assertEqual(sorted(map(key, back)), sorted(map(key, rows)))
        for a, b in zip(sorted(back, key=key), sorted(rows, key=key)):
            self.assertTrue(close(a["seconds"], b["seconds"], 1e-3), (a, b))

    def test_ranks_sharing_cores_stretch_every_term(self):
        # Rows measured with p ranks bound round-robin to 2 cores: the
        # simulator's crowding made them; the fit recovers the constants,
        # and without the cores the same rows cannot be fitted.
        # Part of a byte's time (beta_fixed: the kernel's queues of a TCP
        # link) is not stretched; the fit tells it from the stretched part.
        rows = []
        for p in (2, 3, 4, 8):
            for algo in ("ring", "rd", "hd"):  # (rd tells beta from gamma: ring's and hd's are in one ratio)
                for n in (65536, 1 << 22):
                    link = sim.Link(A, B, cpu=True, beta_fixed=B / 2)
                    c = sim.Cluster(1, p, link, link, G, contention=False, cores=2)
                    rows.append({"setting": "s", "ranks": p, "hosts": 1, "bytes": n, "algorithm": algo,
                                 "seconds": sim.allreduce_time(c, algo, n)})
        k = sim.fit_constants(rows, cores=2)
        self.assertTrue(close(k["alpha"], A, 1e-6) and close(k["beta"], B, 1e-6) and close(k["gamma"], G, 1e-6), k)
        self.assertTrue(close(k["beta_fixed"], B / 2, 1e-6), k)
        self.assertTrue(close(sim.predict_row(k, rows[-1]), rows[-1]["seconds"], 1e-6))
        k0 = sim.fit_constants(rows)
        self.assertGreater(max(abs(sim.predict_row(k0, r) / r["seconds"] - 1) for r in rows), 0.1)

    def test_a_beta_curve_over_the_sizes(self):
        # Time per byte that grows as the buffers leave the caches: one beta
        # per size, interpolated in log size between them; the fit finds them.
        sizes = (1 << 20, 1 << 22, 1 << 24)
        betas = (B, 2 * B, 3 * B)
        rows = []
        for p in (2, 4):
            for algo in ("ring", "rd"):
                for n in (1 << 18, 1 << 20, 1 << 21, 1 << 22, 1 << 24, 1 << 26):
                    link = sim.Link(A, B, betas=betas)
                    c = sim.Cluster(1, p, link, link, G, contention=False, sizes=sizes)
                    rows.append({"setting": "s", "ranks": p, "hosts": 1, "bytes": n, "algorithm": algo,
                                 "seconds": sim.allreduce_time(c, algo, n)})
        k = sim.fit_constants(rows, sizes=sizes)
        self.assertTrue(all(close(got, want, 1e-6) for got, want in zip(k["betas"], betas)), k)
        self.assertTrue(close(k["alpha"], A, 1e-6) and close(k["gamma"], G, 1e-6), k)
        # 2 MiB lies halfway (in log size) between 1 and 4 MiB: 1.5 B; the
        # ends hold beyond the ends.
        half = next(r for r in rows if r["bytes"] == 1 << 21 and r["algorithm"] == "ring" and r["ranks"] == 2)
        self.assertTrue(close(half["seconds"], (A + half["bytes"] / 2 * 1.5 * B) * 2 + half["bytes"] / 2 * G))
        # Ranks sharing a core share its caches: 4 ranks on 2 cores, 1 MiB
        # each, are 2 MiB on a core (beta 1.5 B), and each step stretched 2x.
        n = 1 << 20
        crowded = sim.Cluster(1, 4, sim.Link(A, B, betas=betas, cpu=True), sim.Link(A, B, betas=betas, cpu=True), G,
                              cores=2, sizes=sizes)
        self.assertTrue(close(sim.allreduce_time(crowded, "ring", n), 6 * (A + n / 4 * 1.5 * B) * 2 + 0.75 * n * G * 2))
        self.assertEqual(sim.interpolate(sizes, betas, 1 << 10), B)
        self.assertEqual(sim.interpolate(sizes, betas, 1 << 30), 3 * B)
        # A wire's fit has one beta, whatever the sizes.
        self.assertIsNone(sim.fit_constants(rows, sizes=sizes, wire=True)["betas"])

    def test_a_wire_between_hosts_with_the_cpu_link_inside(self):
        # 2 hosts: inside them a known CPU-bound link (fitted first), between
        # them a wire whose flows share it; the fit finds the wire.
        inside = {"alpha": 2e-6, "beta": 2e-10, "betas": None, "gamma": G, "wire": False}
        wire = sim.Link(5e-5, 8e-9)
        rows = []
        for p in (2, 4, 8):
            for algo in ("ring", "rd", "hd"):
                for n in (4096, 65536, 1 << 20, 1 << 22):
                    c = sim.Cluster(2, p // 2, sim.Link(2e-6, 2e-10, cpu=True), wire, G, contention=True, cores=2)
                    rows.append({"setting": "w", "ranks": p, "hosts": 2, "bytes": n, "algorithm": algo,
                                 "seconds": sim.allreduce_time(c, algo, n)})
        k = sim.fit_constants(rows, cores=2, intra=inside, wire=True)
        self.assertTrue(close(k["alpha"], wire.alpha, 0.02) and close(k["beta"], wire.beta, 0.02), k)
        worst = max(abs(sim.predict_row(k, r) / r["seconds"] - 1) for r in rows)
        self.assertLess(worst, 0.02)
        # A wire is not stretched by ranks sharing cores; a CPU link is, and
        # its flows do not share it.
        n = 1 << 20
        cpu = sim.Link(A, B, cpu=True)
        crowded = sim.Cluster(1, 4, cpu, cpu, 0.0, cores=2)
        self.assertTrue(close(sim.allreduce_time(crowded, "ring", n), 2 * sim.allreduce_time(flat(4, g=0.0), "ring", n)))
        on_wire = sim.Cluster(1, 4, sim.Link(A, B), sim.Link(A, B), 0.0, cores=2)
        self.assertTrue(close(sim.allreduce_time(on_wire, "ring", n), sim.allreduce_time(flat(4, g=0.0), "ring", n)))
        shared = sim.Cluster(2, 4, cpu, cpu, 0.0, contention=True)
        self.assertTrue(close(sim.allreduce_time(shared, "hd", n), sim.allreduce_time(flat(8, g=0.0), "hd", n)))

    def test_the_busiest_core_sets_the_pace(self):
        # Bound round-robin, 3 ranks on 2 cores: ranks 0 and 2 share core 0.
        cpu = sim.Link(A, B, cpu=True)
        c = sim.Cluster(1, 3, cpu, cpu, G, contention=False, cores=2)
        self.assertEqual(c.crowding([0, 1]), 1.0)
        self.assertEqual(c.crowding([0, 2]), 2.0)
        self.assertEqual(c.crowding(3), 2.0)
        # Recursive doubling folds rank 1 into rank 0 (ranks 0 and 1 at work:
        # one each core; one way: half an exchange's copies), then ranks 0
        # and 2 exchange (both on core 0), then rank 0 returns the result to
        # rank 1.
        n = 1 << 20
        want = (A + n * B / 2) + n * G + 2 * ((A + n * B) + n * G) + (A + n * B / 2)
        self.assertTrue(close(sim.allreduce_time(c, "rd", n), want))
        # The test hosts pinned: every rank of host h on core h.
        hosts = sim.Cluster(2, 3, cpu, cpu, G, contention=False, cores=2, placement="host")
        self.assertEqual(hosts.crowding([0, 1, 2, 3]), 3.0)
        self.assertEqual(hosts.crowding([2, 3]), 1.0)
        self.assertEqual(hosts.crowding(6), 3.0)
        # A real cluster (no cores given): nothing is stretched.
        self.assertEqual(flat(8).crowding(8), 1.0)
        # beta_fixed: bytes' time that sharing a core does not stretch.
        fixed = sim.Link(A, B, cpu=True, beta_fixed=2 * B)
        self.assertTrue(close(fixed.time(n, crowd=3.0), 3 * (A + n * B) + 2 * n * B))
        self.assertTrue(close(fixed.one_way(n, crowd=3.0), 3 * (A + n * B / 2) + 2 * n * B))
        self.assertEqual(sim.Link(A, B).one_way(n, crowd=3.0), A + n * B)

    def test_runs_pool_by_median(self):
        rows = [{"setting": "s", "ranks": 2, "hosts": 1, "bytes": 8, "algorithm": "ring", "seconds": t}
                for t in (3.0, 1.0, 2.0, 10.0)]
        pooled = sim.pool_rows(rows)
        self.assertEqual(len(pooled), 1)
        self.assertEqual(pooled[0]["seconds"], 2.5)
        self.assertEqual(pooled[0]["runs"], 4)
        self.assertEqual((pooled[0]["fastest"], pooled[0]["slowest"]), (1.0, 10.0))

    def test_busbw_table_from_pooled_runs(self):
        # busbw = n/t x 2(p-1)/p for the allreduces, n/t for memcpy.
        import plot_scaling
        mib = 1 << 20
        rows = [{"setting": "shm", "ranks": 4, "hosts": 1, "bytes": mib, "algorithm": a, "seconds": t}
                for a, t in (("ring", 1e-3), ("ring", 3e-3), ("ring", 2e-3), ("mpi", 1.5e-3),
                             ("memcpy", 1e-4))]
        with tempfile.TemporaryDirectory() as d:
            with open(plot_scaling.busbw_table(rows, d)) as f:
                lines = f.read().splitlines()
        self.assertEqual(len(lines), 3)
        self.assertEqual(lines[2], f"| shm | 4 | 1 MiB |  | {mib / 2e-3 * 1.5 / 1e9:.2f} |  |  | "
                                   f"{mib / 1.5e-3 * 1.5 / 1e9:.2f} | {mib / 1e-4 / 1e9:.2f} |")

    def test_rows_timed_with_the_cores_far_apart_are_left_out(self):
        # kept 0: no round of the row was between near core probes. Older
        # CSVs without the column keep every row.
        with tempfile.TemporaryDirectory() as d:
            new, old = os.path.join(d, "new.csv"), os.path.join(d, "old.csv")
            with open(new, "w") as f:
                f.write("setting,ranks,hosts,bytes,algorithm,seconds,best,probe_ns,kept,rounds\n"
                        "shm,2,1,1048576,ring,0.000155,0.00015,75,22,22\n"
                        "shm,2,1,1048576,ring,0.000450,0.00044,290,0,28\n"
                        "shm,2,1,1048576,hd,0.000160,0.00015,75,3,28\n")
            with open(old, "w") as f:
                f.write("setting,ranks,hosts,bytes,algorithm,seconds,best\n"
                        "tcp,2,2,1048576,ring,0.0003,0.00029\n")
            far = []
            rows = sim.read_rows([new, old], far)
            self.assertEqual([(r["setting"], r["algorithm"], r["seconds"]) for r in rows],
                             [("shm", "ring", 0.000155), ("shm", "hd", 0.000160), ("tcp", "ring", 0.0003)])
            self.assertEqual([r["seconds"] for r in far], [0.000450])

    def test_constants_stay_non_negative(self):
        # Times that fall with size would need a negative beta: it is held at 0.
        rows = [{"setting": "s", "ranks": 2, "hosts": 1, "bytes": n, "algorithm": "ring", "seconds": t}
                for n, t in ((1 << 10, 2e-3), (1 << 20, 1e-3), (1 << 24, 1e-3))]
        k = sim.fit_constants(rows)
        self.assertTrue(all(k[key] >= 0 for key in ("alpha", "beta", "gamma")), k)


if __name__ == "__main__":
    unittest.main()
