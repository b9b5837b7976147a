// MpiLinkModel (see mpi_link_model.h): the cost of each algorithm on the
// model's links, the choice among them, and the measurement of the links
// (measure_links: collective, at a communicator's first kAuto allreduce).
#include "dist/mpi/mpi_link_model.h"

#if defined(SPIRE_WITH_MPI)

#include <algorithm>
#include <array>
#include <utility>

#include "core/logger.h"
#include "dist/comm/ring_device.h"
#include "dist/mpi/mpi_waits.h"

namespace spire::dist {

namespace {
// The steps of MpiLinkModel's algorithms on its links: a step's time is
// its slowest message's, a message inside a host takes the host's link, one
// between hosts the link between them, scaled by the step's messages that
// leave its sender's host or reach its receiver's, whichever are more
// (they share the host's link).
class StepModel {
 public:
  StepModel(const MpiLinkModel& m, int n) : m_(m), n_(static_cast<size_t>(std::max(n, 1))) {
    SPIRE_CHECK(m.host_of.empty() || m.host_of.size() == static_cast<size_t>(n), "MpiLinkModel: host_of has ",
                m.host_of.size(), " ranks, the allreduce ", n);
    for (int h : m.host_of)
      SPIRE_CHECK(h >= 0 && h < n, "MpiLinkModel: host ", h, " of ", n, " ranks (a host is its lowest rank)");
  }
  // Every (from, to) of `flows` sends `bytes` at once. A message between
  // hosts shares the sender's link with the step's other messages leaving
  // its host, and the receiver's with those arriving at its host: the
  // busier of the two bounds it.
  double step(const std::vector<std::pair<int, int>>& flows, double bytes) const {
    leaving_.assign(n_, 0);  // per host (a host is its lowest rank: < n)
    arriving_.assign(n_, 0);
    for (const auto& [a, b] : flows)
      if (crosses(a, b)) ++leaving_[host(a)], ++arriving_[host(b)];
    double worst = 0;
    for (const auto& [a, b] : flows) {
      const bool cross = crosses(a, b), inside = !m_.host_of.empty() && !cross && m_.host_beta > 0;
      const double alpha = inside ? m_.host_alpha : m_.alpha, beta = inside ? m_.host_beta : m_.beta;
      const int share = cross ? std::max(leaving_[host(a)], arriving_[host(b)]) : 1;
      worst = std::max(worst, alpha + bytes * beta * share);
    }
    return worst;
  }
  // Ranks beyond the largest power of two p <= n fold into a partner
  // (plan_fold's pairs) and get the result back: the ranks that take part
  // (real ranks in the algorithm's order) and the fold's time (2 messages
  // of the whole buffer and one reduction).
  std::pair<std::vector<int>, double> fold(int n, double bytes) const {
    FoldPlan plan = plan_fold(m_.host_of.empty() ? std::vector<int>(n_, 0) : m_.host_of);
    if (static_cast<int>(plan.ranks.size()) == n) return {std::move(plan.ranks), 0.0};
    std::vector<std::pair<int, int>> in, back;
    for (int r = 0; r < n; ++r) {
      const int q = plan.partner[static_cast<size_t>(r)];
      if (q >= 0 && q < r) in.emplace_back(r, q), back.emplace_back(q, r);
    }
    return {std::move(plan.ranks), step(in, bytes) + step(back, bytes) + bytes * m_.gamma};
  }
  // The pairwise exchange at distance d among `ranks`.
  double exchange(const std::vector<int>& ranks, int d, double bytes) const {
    std::vector<std::pair<int, int>> flows;
    for (size_t i = 0; i < ranks.size(); ++i) flows.emplace_back(ranks[i], ranks[i ^ static_cast<size_t>(d)]);
    return step(flows, bytes);
  }

 private:
  size_t host(int r) const { return m_.host_of.empty() ? 0 : static_cast<size_t>(m_.host_of[static_cast<size_t>(r)]); }
  bool crosses(int a, int b) const { return host(a) != host(b); }
  const MpiLinkModel& m_;
  size_t n_;
  mutable std::vector<int> leaving_, arriving_;  // step()'s counts, kept between steps
};
}  // namespace

double MpiLinkModel::ring_allreduce_seconds(int n, int64_t bytes) const {
  // (The ring's reductions overlap the next segment's transfer: no gamma term.)
  const StepModel model(*this, n);
  std::vector<std::pair<int, int>> flows;
  for (int r = 0; r < n; ++r) flows.emplace_back(r, (r + 1) % n);
  return 2.0 * (n - 1) * model.step(flows, static_cast<double>(bytes) / n);
}

double MpiLinkModel::recursive_doubling_seconds(int n, int64_t bytes) const {
  const StepModel model(*this, n);
  const double m = static_cast<double>(bytes);
  auto [ranks, t] = model.fold(n, m);
  for (size_t d = 1; d < ranks.size(); d *= 2) t += model.exchange(ranks, static_cast<int>(d), m) + m * gamma;
  return t;
}

double MpiLinkModel::halving_doubling_seconds(int n, int64_t bytes) const {
  // (Its segments' reductions overlap the next segment's transfer, yet
  // they are counted in full: so the model matches the benchmarks
  // (bench/README.md), where the ring is as fast or faster for large
  // messages.)
  const StepModel model(*this, n);
  double part = static_cast<double>(bytes);
  auto [ranks, t] = model.fold(n, part);
  size_t d = 1;
  for (; d < ranks.size(); d *= 2) {  // reduce-scatter: partners at distance 1 first, halves shrinking
    part /= 2;
    t += model.exchange(ranks, static_cast<int>(d), part) + part * gamma;
  }
  while (d > 1) {  // allgather: the reverse
    d /= 2;
    t += model.exchange(ranks, static_cast<int>(d), part);
    part *= 2;
  }
  return t;
}

MpiAlgorithm MpiLinkModel::choose(int n, int64_t bytes) const {
  const double ring = ring_allreduce_seconds(n, bytes), rd = recursive_doubling_seconds(n, bytes),
               hd = halving_doubling_seconds(n, bytes);
  if (rd <= hd && rd < ring) return MpiAlgorithm::kRecursiveDoubling;
  if (hd < ring) return MpiAlgorithm::kHalvingDoubling;
  return MpiAlgorithm::kRing;
}

namespace mpi_detail {

void measure_links(MpiCommunicator::Impl& impl, CallWaits& waits) {
  const int n = impl.size, me = impl.rank;
  MPI_Comm comm = impl.comm;
  // Rank 0 and the last rank ping-pong 8-byte and 1 MiB messages; rank 0 fits
  // alpha (half the small round trip) and beta (the large one's extra time
  // per byte) and sends both to every rank. Where the ranks span hosts, the
  // partner is the last rank on another host than rank 0 (the last rank
  // when ranks are placed host by host: the links that bound a ring across
  // hosts), and rank 0 also measures the link inside its host with the
  // first rank that shares it, if any.
  const std::vector<int>& host_of = MpiRuntime::get().hosts();
  int cross = -1, mate = -1;
  if (host_of.size() == static_cast<size_t>(n)) {
    for (int r = n - 1; r > 0 && cross < 0; --r)
      if (host_of[static_cast<size_t>(r)] != host_of[0]) cross = r;
    for (int r = 1; r < n && cross >= 0 && mate < 0; ++r)
      if (host_of[static_cast<size_t>(r)] == host_of[0]) mate = r;
  }
  const int last = cross >= 0 ? cross : n - 1;
  // The steps of a recursive-doubling allreduce on n ranks (log2 of the
  // largest power of two <= n, plus the fold and copy-back beyond it).
  int rd_steps = 0;
  {
    int p = 1;
    while (p * 2 <= n) p *= 2, ++rd_steps;
    if (p != n) rd_steps += 2;
  }
  constexpr int kSmallTrips = 50, kLargeTrips = 6;
  constexpr int64_t kLarge = 1 << 20;
  auto buffer = std::make_shared<std::vector<char>>(static_cast<size_t>(kLarge));
  waits.keep(buffer);
  // alpha, beta, gamma, step, host alpha, host beta
  constexpr int kResults = 6;
  auto result = std::make_shared<std::array<double, kResults>>();
  result->fill(0.0);
  waits.keep(result);
  // One round trip of `bytes` with `peer`: the `first` end sends, then
  // receives; the other end the reverse.
  auto exchange = [&](int peer, bool first, int64_t bytes) {
    auto message = [&](bool send) {
      MPI_Request req;
      if (send)
        check_mpi(MPI_Isend(buffer->data(), static_cast<int>(bytes), MPI_CHAR, peer, kTagCalibrate, comm, &req),
                  "MPI_Isend");
      else
        check_mpi(MPI_Irecv(buffer->data(), static_cast<int>(bytes), MPI_CHAR, peer, kTagCalibrate, comm, &req),
                  "MPI_Irecv");
      waits.wait(req, str_cat("rank ", peer, " in the link measurement"));
    };
    message(first);
    message(!first);
  };
  // The fastest of `count` round trips, one way: the links' own time, not
  // the scheduler's (ranks may share cores with other work).
  auto trips = [&](int peer, bool first, int64_t bytes, int count) {
    for (int w = 0; w < 2; ++w) exchange(peer, first, bytes);  // warm-up
    double best = 1e9;
    for (int k = 0; k < count; ++k) {
      const auto t0 = Clock::now();
      exchange(peer, first, bytes);
      best = std::min(best, seconds(Clock::now() - t0) / 2.0);
    }
    return best;
  };
  // One link's alpha and beta from ping-pongs between rank 0 and `peer`.
  auto measure = [&](int peer, double* alpha, double* beta) {
    const double small = trips(peer, me == 0, 8, kSmallTrips);
    const double large = trips(peer, me == 0, kLarge, kLargeTrips);
    *alpha = std::max(small, 1e-7);
    // (A large message no slower than twice a small one: noise; take it all as bandwidth.)
    const double transfer = large > 2 * *alpha ? large - *alpha : large;
    *beta = std::max(transfer / static_cast<double>(kLarge), 1e-13);
  };
  if (me == 0 || me == last) measure(me == 0 ? last : 0, &(*result)[0], &(*result)[1]);
  if (mate > 0 && (me == 0 || me == mate)) measure(me == 0 ? mate : 0, &(*result)[4], &(*result)[5]);
  if (me == 0) {
    // gamma: this rank's f32 sum of 1 MiB (the best of 5).
    std::unique_ptr<RingDevice> dev = make_ring_device(Device::cpu(), 0);
    std::vector<float> a(static_cast<size_t>(kLarge / 4), 1.5f), b(a.size(), 2.5f), c(a.size());
    double best = 1e9;
    for (int k = 0; k < 5; ++k) {
      const auto t0 = Clock::now();
      dev->combine(ReduceOp::kSum, DType::F32, c.data(), a.data(), b.data(), Device::cpu(),
                   static_cast<int64_t>(a.size()), 1);
      best = std::min(best, seconds(Clock::now() - t0));
    }
    (*result)[2] = std::max(best / static_cast<double>(kLarge), 1e-14);
  }
  // A step of a collective with every rank at work: the median of 15
  // recursive-doubling allreduces of 8 bytes, per exchange. Where ranks
  // share cores it is far more than the ping-pong's alpha (a step waits
  // for every rank to be scheduled), and it is what each step of an
  // algorithm pays.
  {
    auto small = std::make_shared<std::array<Tensor, 2>>();
    waits.keep(small);
    (*small)[0] = Tensor(DType::F32, Shape{2});
    (*small)[1] = Tensor(DType::F32, Shape{2});
    (*small)[0].data<float>()[0] = 1.0f, (*small)[0].data<float>()[1] = static_cast<float>(me);
    CollectiveSignature sig;
    sig.kind = CollectiveKind::kAllReduce;
    sig.dtype = DType::F32;
    sig.count = 2;
    std::vector<double> times;
    for (int k = 0; k < 18; ++k) {
      Participant q{0, (*small)[0], (*small)[1]};
      const auto t0 = Clock::now();
      recursive_doubling(impl, waits, sig, q, ReduceOp::kSum, /*halving=*/false);
      if (k >= 3) times.push_back(seconds(Clock::now() - t0));  // (3 warm-up calls)
    }
    std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2), times.end());
    (*result)[3] = times[times.size() / 2] / rd_steps;
  }
  if (me == 0) {
    std::vector<MPI_Request> sends(static_cast<size_t>(n), MPI_REQUEST_NULL);
    for (int r = 1; r < n; ++r)
      check_mpi(MPI_Isend(result->data(), kResults, MPI_DOUBLE, r, kTagCalibrate + 1, comm,
                          &sends[static_cast<size_t>(r)]),
                "MPI_Isend");
    for (int r = 1; r < n; ++r) waits.wait(sends[static_cast<size_t>(r)], str_cat("rank ", r, " to take the link model"));
  } else {
    MPI_Request req;
    check_mpi(MPI_Irecv(result->data(), kResults, MPI_DOUBLE, 0, kTagCalibrate + 1, comm, &req), "MPI_Irecv");
    waits.wait(req, "rank 0's link model");
  }
  MpiLinkModel& model = impl.model;
  model.link_alpha = (*result)[0];
  model.step_alpha = (*result)[3];
  model.link_peer = last;
  model.alpha = model.link_alpha;
  model.beta = (*result)[1];
  model.gamma = (*result)[2];
  if (mate > 0) {
    model.host_alpha = (*result)[4];
    model.host_beta = (*result)[5];
  }
  if (cross >= 0) model.host_of = host_of;
  // What a step with every rank at work costs beyond the ping-pongs'
  // latencies (the 8-byte allreduce's steps, each at its pair's link) is
  // added to both links' alpha: with one link, alpha = max(ping-pong, step).
  const double links = model.recursive_doubling_seconds(n, 0);  // (0 bytes: the steps' alphas)
  const double excess = std::max(0.0, model.step_alpha - links / rd_steps);
  model.alpha += excess;
  if (mate > 0) model.host_alpha += excess;
  impl.choices.clear();
  model.measured = true;
  if (me == 0)
    logger::info("MPI links (ranks 0-", last, "): alpha ", model.alpha * 1e6, " us (ping-pong ",
                 model.link_alpha * 1e6, " us, a collective's step ", model.step_alpha * 1e6, " us), beta ",
                 1e-9 / model.beta, " GB/s",
                 mate > 0 ? str_cat("; inside a host (ranks 0-", mate, "): alpha ", model.host_alpha * 1e6,
                                    " us (ping-pong ", (*result)[4] * 1e6, " us), beta ", 1e-9 / model.host_beta,
                                    " GB/s")
                          : std::string(),
                 ", reduction ", 1e-9 / model.gamma, " GB/s; chooses ",
                 [&] {
                   std::string out;
                   MpiAlgorithm prev = MpiAlgorithm::kAuto;
                   for (int64_t b = 4; b <= (int64_t{1} << 30); b *= 2) {
                     const MpiAlgorithm a = model.choose(n, b);
                     if (a != prev) out += str_cat(out.empty() ? "" : ", ", mpi_algorithm_name(a), " from ", b, " B");
                     prev = a;
                   }
                   return out;
                 }(),
                 " on ", n, " ranks");
}

}  // namespace mpi_detail
}  // namespace spire::dist

#endif  // SPIRE_WITH_MPI
