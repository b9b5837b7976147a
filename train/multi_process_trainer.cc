// MultiProcessTrainer (see multi_process_trainer.h): the chief's values and
// the chief's loop on every process, written once for every multi-process
// trainer.
#include "train/multi_process_trainer.h"

#include <map>

#include "core/error.h"
#include "core/logger.h"

namespace spire {

MultiProcessTrainer::~MultiProcessTrainer() = default;

std::vector<int64_t> MultiProcessTrainer::broadcast_from_chief(const std::vector<int64_t>& values,
                                                               const std::string& what) {
  std::vector<int64_t> out = chief_values(values, what);
  SPIRE_CHECK(out.size() == values.size(), process_name(), ": ", what, ": the chief sent ", out.size(),
              " value(s), this process has ", values.size());
  return out;
}

int64_t MultiProcessTrainer::broadcast_from_chief(int64_t value, const std::string& what) {
  return broadcast_from_chief(std::vector<int64_t>{value}, what)[0];
}

void MultiProcessTrainer::synchronize_loop(int64_t& steps_per_epoch, int& starting_epoch, int& max_epoch) {
  const std::vector<int64_t> given = {steps_per_epoch, starting_epoch, max_epoch};
  const std::vector<int64_t> chief = broadcast_from_chief(given, "synchronize_loop");
  if (chief != given)
    logger::info(process_name(), " runs the chief's loop: steps_per_epoch ", chief[0], ", epochs ", chief[1], "..",
                 chief[2], " (it was given ", steps_per_epoch, ", ", starting_epoch, "..", max_epoch, ")");
  steps_per_epoch = chief[0];
  starting_epoch = static_cast<int>(chief[1]);
  max_epoch = static_cast<int>(chief[2]);
}

namespace {

// FNV-1a of a node name: how processes name a random stream to each other.
int64_t name_hash(const std::string& name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return static_cast<int64_t>(h);
}

}  // namespace

void MultiProcessTrainer::synchronize_rng(Session& session) {
  // Two rounds: the chief's number of streams, then its (name hash, offset) pairs.
  const auto mine = session.rng_offsets();
  const int64_t count = broadcast_from_chief(static_cast<int64_t>(mine.size()), "synchronize_rng (count)");
  SPIRE_CHECK(count >= 0 && count < (int64_t{1} << 24), process_name(), ": synchronize_rng: the chief has ", count,
              " random streams");
  std::vector<int64_t> pairs(static_cast<size_t>(2 * count), 0);
  for (size_t i = 0; i < mine.size() && i < static_cast<size_t>(count); ++i) {
    pairs[2 * i] = name_hash(mine[i].first->name());
    pairs[2 * i + 1] = static_cast<int64_t>(mine[i].second);
  }
  const std::vector<int64_t> chief = broadcast_from_chief(pairs, "synchronize_rng");
  std::map<int64_t, const Node*> by_hash;
  for (const auto& node : session.graph().nodes())
    if (node) by_hash.emplace(name_hash(node->name()), node.get());
  int64_t set = 0;
  for (size_t i = 0; i < chief.size(); i += 2) {
    auto it = by_hash.find(chief[i]);
    if (it == by_hash.end()) continue;
    session.set_rng_offset(it->second, static_cast<uint64_t>(chief[i + 1]));
    ++set;
  }
  if (set != count)
    logger::info(process_name(), ": ", count - set, " of the chief's ", count,
                 " random streams are not in this process's graph");
}

}  // namespace spire
