// Test support: communicators that stand in for NCCL across processes on a
// machine without a GPU. RecordingCommunicator forwards every call to an
// inner communicator (e.g. an MpiCommunicator) and records it.
// FakeGpuCommunicator is one that behaves as NCCL does where it matters to
// the callers: it checks nothing (it hides each call's identity from the
// inner communicator, so ranks that issue different collectives of one size
// pair them silently), and with `graph_calls_only` it throws, as NCCL does
// for host tensors, on every call that does not come from a graph
// collective's kernel (CollectiveCall::kernel null: the trainers' host-side
// control calls) and on agree() (NCCL cannot compare host lists).
// StubCommunicator only tells its rank and devices (for construction checks).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dist/comm/communicator.h"

namespace spire::testing {

/// One call a RecordingCommunicator saw.
struct RecordedCall {
  std::string kind;        ///< "allreduce", ..., or "agree"
  std::string name;        ///< CollectiveCall::name, or agree()'s `what`
  bool from_graph = false;  ///< made by a graph collective's kernel
};

/// Forwards every call to `inner` and records it (thread-safe: lanes call concurrently).
class RecordingCommunicator : public dist::DispatchingCommunicator {
 public:
  explicit RecordingCommunicator(std::shared_ptr<dist::Communicator> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return "recording(" + inner_->name() + ")"; }
  const std::vector<Device>& devices() const override { return inner_->devices(); }
  int rank() const override { return inner_->rank(); }
  int num_ranks() const override { return inner_->num_ranks(); }
  void agree(const std::string& what, const std::vector<std::string>& items) override {
    record({"agree", what, false});
    inner_->agree(what, items);
  }
  /// The calls so far, in the order they came.
  std::vector<RecordedCall> calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }

 protected:
  void record(RecordedCall c) {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.push_back(std::move(c));
  }
  void run(dist::CollectiveKind kind, const dist::CollectiveCall& call, std::vector<dist::Participant>& parts,
           dist::ReduceOp op, int root) override {
    record({dist::collective_kind_name(kind), call.name, call.kernel != nullptr});
    forward(kind, call, parts, op, root);
  }
  void forward(dist::CollectiveKind kind, const dist::CollectiveCall& call, std::vector<dist::Participant>& parts,
               dist::ReduceOp op, int root) {
    switch (kind) {
      case dist::CollectiveKind::kAllReduce: inner_->allreduce(call, parts, op); break;
      case dist::CollectiveKind::kBroadcast: inner_->broadcast(call, parts, root); break;
      case dist::CollectiveKind::kAllGather: inner_->allgather(call, parts); break;
      case dist::CollectiveKind::kReduceScatter: inner_->reduce_scatter(call, parts, op); break;
      case dist::CollectiveKind::kBarrier: inner_->barrier(call, parts); break;
    }
  }

 private:
  std::shared_ptr<dist::Communicator> inner_;
  mutable std::mutex mu_;
  std::vector<RecordedCall> calls_;
};

/// NCCL's behaviour over `inner` (see the file comment).
class FakeGpuCommunicator : public RecordingCommunicator {
 public:
  FakeGpuCommunicator(std::shared_ptr<dist::Communicator> inner, bool graph_calls_only)
      : RecordingCommunicator(std::move(inner)), graph_calls_only_(graph_calls_only) {}
  std::string name() const override { return "fake-gpu(" + RecordingCommunicator::name() + ")"; }
  void agree(const std::string& what, const std::vector<std::string>& items) override {
    (void)items;
    record({"agree", what, false});
    if (graph_calls_only_) throw_error(name(), ": agree '", what, "': NCCL cannot compare host lists");
  }

 protected:
  void run(dist::CollectiveKind kind, const dist::CollectiveCall& call, std::vector<dist::Participant>& parts,
           dist::ReduceOp op, int root) override {
    record({dist::collective_kind_name(kind), call.name, call.kernel != nullptr});
    if (graph_calls_only_ && !call.kernel)
      throw_error(name(), ": ", dist::collective_kind_name(kind), " '", call.name,
                  "': NCCL takes device tensors, not a host-side control call's (invalid argument)");
    dist::CollectiveCall blind = call;  // NCCL checks nothing: hide which collective this is
    blind.identity = "nccl";
    blind.name = "nccl";
    forward(kind, blind, parts, op, root);
  }

 private:
  bool graph_calls_only_;
};

/// A communicator that only tells who it is (rank, rank count, devices): for the checks a
/// trainer or wrapper makes when it is built. Its collectives throw.
class StubCommunicator : public dist::DispatchingCommunicator {
 public:
  StubCommunicator(int rank, int num_ranks, std::vector<Device> devices)
      : rank_(rank), num_ranks_(num_ranks), devices_(std::move(devices)) {}
  std::string name() const override { return str_cat("stub(rank ", rank_, " of ", num_ranks_, ")"); }
  const std::vector<Device>& devices() const override { return devices_; }
  int rank() const override { return rank_; }
  int num_ranks() const override { return num_ranks_; }

 protected:
  void run(dist::CollectiveKind kind, const dist::CollectiveCall& call, std::vector<dist::Participant>&,
           dist::ReduceOp, int) override {
    throw_error(name(), ": ", dist::collective_kind_name(kind), " '", call.name, "' was not expected");
  }

 private:
  int rank_, num_ranks_;
  std::vector<Device> devices_;
};

}  // namespace spire::testing
