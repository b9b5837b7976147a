// The distributed trainers with parameter servers across MPI ranks (runs in
// spire_mpi_tests under mpirun on 2, 3 and 4 ranks: 1 server and 1 or 2
// workers, or 2 servers and 2 workers): SGD updates equal the hand-computed
// reference on every worker, bit for bit; the servers hold exactly what the
// workers read; the chief's checkpoint restores into SimpleTrainer, and
// resuming from it equals training straight through. The failure modes
// (a worker raising, a worker or a server killed) run through
// rank_failures.py (run_ps_failure below).
#include <gtest/gtest.h>

#include <csignal>
#include <thread>

#include "dist/trainers/distributed_trainers.h"
#include "dist/mpi/mpi_runtime.h"
#include "tests/dist/mpi/mpi_test_util.h"
#include "tests/support/ps_test_models.h"
#include "tests/support/step_callbacks.h"
#include "tests/support/temp_dir.h"
#include "train/callbacks.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/input_source.h"
#include "train/session_init.h"

namespace spire {
namespace {

using testing::integer_batches;
using testing::kLinearInit;
using testing::LinearModel;

int rank() { return dist::MpiRuntime::get().rank(); }
int nranks() { return dist::MpiRuntime::get().size(); }
int servers() { return nranks() >= 4 ? 2 : 1; }

std::vector<Datapoint> worker_data(int w) { return integer_batches(3, w + 1); }

struct DistRun {
  std::map<std::string, Tensor> values;  // a worker's global variables, or a server's state
  bool server = false;
};

DistRun train_dist(bool replicated, bool momentum, int max_epoch, int starting_epoch = 1,
               std::shared_ptr<SessionInit> init = std::make_shared<DictRestore>(kLinearInit),
               const std::string& logdir = "", std::vector<CallbackPtr> callbacks = {},
               DistributedOptions o = {}) {
  o.num_ps = servers();
  std::unique_ptr<DistributedTrainerBase> t;
  if (replicated) t = std::make_unique<DistributedTrainerReplicated>(std::vector<Device>{Device::cpu()}, o);
  else t = std::make_unique<DistributedTrainerParameterServer>(std::vector<Device>{Device::cpu()}, o);
  TrainConfig cfg;
  cfg.model = std::make_shared<LinearModel>(momentum);
  cfg.data = std::make_shared<FeedInput>(
      std::make_shared<DataFromList>(worker_data(std::max(0, t->worker_index())), false));
  cfg.steps_per_epoch = 3;
  cfg.max_epoch = max_epoch;
  cfg.starting_epoch = starting_epoch;
  cfg.monitors = std::vector<MonitorPtr>{};
  cfg.extra_callbacks = std::vector<CallbackPtr>{};
  cfg.callbacks = std::move(callbacks);
  cfg.session_init = std::move(init);
  cfg.logdir = logdir;
  t->graph().set_seed(50 + static_cast<uint64_t>(rank()));
  launch_train_with_config(cfg, *t);
  DistRun r;
  r.server = t->is_ps();
  r.values = r.server ? t->server_state() : get_variable_values(t->session());
  return r;
}

int64_t fnv(const Tensor& t) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const unsigned char*>(t.raw_data());
  for (size_t i = 0; i < t.nbytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
  return static_cast<int64_t>(h >> 1);
}

TEST(DistributedTrainersMpi, SgdEqualsTheReferenceAndTheServersHoldWhatTheWorkersRead) {
  const int workers = nranks() - servers();
  for (bool replicated : {false, true}) {
    const DistRun r = train_dist(replicated, /*momentum=*/false, 1);
    const auto want = testing::sgd_reference(worker_data, 3, workers, 1);
    for (const auto& [name, t] : want) {
      if (!r.server) {
        ASSERT_TRUE(r.values.count(name)) << name;
        for (int64_t i = 0; i < t.num_elements(); ++i)
          EXPECT_EQ(r.values.at(name).element_as_double(i), t.element_as_double(i)) << name << "[" << i << "]";
      }
      // The server holding `name` and every worker: the same bytes.
      const int64_t mine = r.values.count(name) ? fnv(r.values.at(name)) : 0;
      const std::vector<int64_t> all = testing::gather_from_ranks(mine);
      int holders = 0;
      for (int q = 0; q < nranks(); ++q) {
        if (q >= servers()) EXPECT_EQ(all[static_cast<size_t>(q)], fnv(t)) << name << " on rank " << q;
        else if (all[static_cast<size_t>(q)] != 0) {
          ++holders;
          EXPECT_EQ(all[static_cast<size_t>(q)], fnv(t)) << name << " on server rank " << q;
        }
      }
      EXPECT_EQ(holders, 1) << name;
    }
  }
}

TEST(DistributedTrainersMpi, TheChiefsCheckpointRestoresIntoSimpleTrainerAndResumes) {
  const DistRun through = train_dist(false, /*momentum=*/true, 2);
  testing::TempDir dir;
  const DistRun first = train_dist(false, true, 1, 1, std::make_shared<DictRestore>(kLinearInit), dir.path(),
                               {std::make_shared<ModelSaver>()});
  const bool chief = rank() == servers();
  std::string ckpt;
  if (chief) {
    ckpt = latest_checkpoint(dir.path());
    ASSERT_FALSE(ckpt.empty());
    // SimpleTrainer takes it: every saved value, slots included.
    const auto restored = testing::linear_values_restored_from(ckpt);
    for (const char* name : {"w", "v", "w/Momentum", "v/Momentum"})
      EXPECT_EQ(fnv(restored.at(name)), fnv(first.values.at(name))) << name;
  }
  // Epoch 2 from the chief's checkpoint equals the straight run (only the
  // chief restores; the others get its values through the servers).
  const DistRun resumed = train_dist(false, true, 2, 2,
                                 chief ? std::shared_ptr<SessionInit>(std::make_shared<CheckpointRestore>(ckpt))
                                       : std::make_shared<DictRestore>(std::map<std::string, Tensor>{}));
  // (A worker other than the chief never fetches the servers' slots: its
  // copies are whatever it was given at the start.)
  for (const auto& [name, t] : through.values)
    if (through.server || chief || name.find('/') == std::string::npos)
      EXPECT_EQ(fnv(resumed.values.at(name)), fnv(t)) << name;
}

}  // namespace

// A failure for tests/dist/mpi/rank_failures.py: "ps-raise-worker" (rank 1,
// a worker, raises in a callback), "ps-kill-worker" (rank 1 is SIGKILLed
// during training), "ps-kill-server" (rank 0, the server, is SIGKILLed): no
// time limit, the MPI runtime's heartbeats name the dead rank. Every rank that
// fails prints "rank R: spire::Error: ..." and returns 1.
int run_ps_failure(const std::string& mode) {
  DistributedOptions o;  // (no time limit: a killed rank is found by the MPI runtime's heartbeats)
  std::vector<CallbackPtr> cbs;
  if (mode == "ps-raise-worker" && rank() == 1) cbs.push_back(std::make_shared<testing::AtStep>(2, [](Trainer&) { throw Error("the worker's model raised: boom"); }));
  const int victim = mode == "ps-kill-server" ? 0 : mode == "ps-kill-worker" ? 1 : -1;
  if (rank() == victim)
    std::thread([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      ::raise(SIGKILL);
    }).detach();
  try {
    // Many steps, so the kill comes during training.
    o.num_ps = 1;
    DistributedTrainerParameterServer t({Device::cpu()}, o);
    TrainConfig cfg;
    cfg.model = std::make_shared<LinearModel>(false);
    cfg.data = std::make_shared<FeedInput>(std::make_shared<DataFromList>(worker_data(0), false));
    cfg.steps_per_epoch = 1000000;
    cfg.max_epoch = 1;
    cfg.monitors = std::vector<MonitorPtr>{};
    cfg.extra_callbacks = std::vector<CallbackPtr>{};
    cfg.callbacks = cbs;
    launch_train_with_config(cfg, t);
    std::fprintf(stderr, "rank %d: no error\n", rank());
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "rank %d: spire::Error: %s\n", rank(), e.what());
    return 1;
  }
}

}  // namespace spire
