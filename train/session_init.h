// Session initializers (tensorpack's SessionInit): how a trainer's session
// gets its variable values after the default initializers ran: nothing
// (JustCurrentSession), a checkpoint (all variables or by name, with
// warnings for missing and unexpected ones), a map of tensors, or a chain.
// Only the chief runs them. A checkpoint also restores the positions of the
// session's random streams (Session::rng_offsets) when it holds them, so a
// resumed run draws the dropout masks the uninterrupted run would have.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/session.h"

namespace spire {

class SessionInit {
 public:
  virtual ~SessionInit() = default;
  /// Sets variables of `session` (whose graph holds them).
  virtual void init(Session& session) = 0;
};

class JustCurrentSession : public SessionInit {
 public:
  void init(Session&) override {}
};

/// Assigns global variables from name -> tensor (local variables, such as
/// replicas, are not restored: multi-device trainers copy the masters to
/// them). Names not in the graph and global variables without a value are
/// reported as warnings (on stderr) unless `strict`, which makes them
/// errors; dtype/shape mismatches are errors.
class DictRestore : public SessionInit {
 public:
  explicit DictRestore(std::map<std::string, Tensor> values, bool strict = false);
  void init(Session& session) override;
  /// Warnings produced by the last init() (for tests and logs).
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  std::map<std::string, Tensor> values_;
  bool strict_;
  std::vector<std::string> warnings_;
};

/// Restores from a safetensors checkpoint file, or from the latest
/// checkpoint of a directory. `ignore` names variables to leave alone. The
/// random streams' positions are restored too when the checkpoint's
/// metadata has them (kRngOffsetsMetadataKey; older checkpoints have none
/// and leave the streams where they are, with a log line).
class CheckpointRestore : public SessionInit {
 public:
  explicit CheckpointRestore(std::string path, std::vector<std::string> ignore = {});
  void init(Session& session) override;
  const std::vector<std::string>& warnings() const;

 private:
  std::string path_;
  std::vector<std::string> ignore_;
  std::unique_ptr<DictRestore> dict_;
};
/// tensorpack's name.
using SaverRestore = CheckpointRestore;

/// Runs several initializers in order.
class ChainInit : public SessionInit {
 public:
  explicit ChainInit(std::vector<std::shared_ptr<SessionInit>> inits) : inits_(std::move(inits)) {}
  void init(Session& session) override {
    for (auto& i : inits_) i->init(session);
  }

 private:
  std::vector<std::shared_ptr<SessionInit>> inits_;
};

/// Every global variable of `session`'s graph (by name) with its current
/// value (uninitialized ones are skipped): what ModelSaver writes. Local
/// variables (replicas of multi-device trainers, is_local_variable) are
/// left out, as tensorpack saves GLOBAL_VARIABLES only: checkpoints hold the
/// master copies under their single-device names.
std::map<std::string, Tensor> get_variable_values(Session& session);

/// The checkpoint metadata key holding the positions of the random streams
/// (what ModelSaver writes, CheckpointRestore restores): one line
/// "<offset> <node name>" per random node that has drawn, in node order.
inline constexpr const char* kRngOffsetsMetadataKey = "rng_offsets";

/// Session::rng_offsets() in the kRngOffsetsMetadataKey format. Throws
/// spire::Error for a node name with a line break (it could not be read back).
std::string encode_rng_offsets(const Session& session);

/// Sets the random streams of `session` from `text` (encode_rng_offsets'
/// format) by node name. Returns a warning for each name that is not a node
/// of the graph (those are skipped). Throws spire::Error naming `source`
/// (the file) for a malformed line; nothing is set then.
std::vector<std::string> restore_rng_offsets(Session& session, const std::string& text,
                                             const std::string& source);

}  // namespace spire
