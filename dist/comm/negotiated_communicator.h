// NegotiatedCommunicator: a Communicator across processes whose every call
// is first negotiated over a second, CPU communicator (the controller), as
// Horovod's controller negotiates each op over MPI before NCCL runs it.
// NCCL checks nothing: processes that issue different collectives of the
// same size pair them silently (corrupt results), and of different sizes
// hang. Wrapped in a NegotiatedCommunicator, each call's CollectiveSignature
// (identity, kind, reduction, root, dtype, shape) is exchanged over the
// controller (one small allgather of host bytes) before the data
// communicator is called, so a mismatch is a CollectiveMismatch on EVERY
// process naming the first rank that differs and both collectives, in
// MpiCommunicator's wording ("ranks disagree: rank 1 called allreduce 'b'
// where rank 0 called allreduce 'a'"). The negotiation's wait is the
// controller's: the run's cancellation and timeout, and (MpiCommunicator)
// the other ranks' failure announcements.
//
// make_process_communicator("nccl") (dist/mpi/mpi_communicator.h) returns
// NCCL wrapped in one, with an MpiCommunicator of its own as the controller.
// agree() goes to the controller (NCCL cannot compare host lists). The
// wrapper knows neither implementation: any two Communicators of one
// participant per process, with the same rank and rank count, will do.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dist/comm/communicator.h"

namespace spire::dist {

class NegotiatedCommunicator final : public DispatchingCommunicator {
 public:
  /// `data` carries the collectives (e.g. NCCL on this process's GPU); `controller` (host
  /// tensors, e.g. an MpiCommunicator) negotiates each call first. Both must have one
  /// participant per process and the same rank and rank count; throws spire::Error naming
  /// both otherwise. `controller` must serve no one else: the ranks' calls on it must come
  /// in the same order as their calls on `data`.
  NegotiatedCommunicator(std::shared_ptr<Communicator> data, std::shared_ptr<Communicator> controller);

  /// "negotiated(<data>, controller <controller>)".
  std::string name() const override;
  const std::vector<Device>& devices() const override { return data_->devices(); }
  int rank() const override { return data_->rank(); }
  int num_ranks() const override { return data_->num_ranks(); }
  /// The controller's agreement (the data communicator's may compare nothing).
  void agree(const std::string& what, const std::vector<std::string>& items) override;

  const Communicator& data() const { return *data_; }
  const Communicator& controller() const { return *controller_; }

  /// Bytes of one rank's encoded signature in the negotiation (a longer identity is
  /// shortened, with a hash of the whole, so different identities still differ).
  static constexpr int64_t kSignatureBytes = 512;

 private:
  void run(CollectiveKind kind, const CollectiveCall& call, std::vector<Participant>& parts,
           ReduceOp op, int root) override;
  /// Exchanges `sig` over the controller; throws CollectiveMismatch on every rank when the
  /// ranks' signatures differ.
  void negotiate(const CollectiveSignature& sig, const CollectiveCall& call, const std::string& where);
  std::shared_ptr<Communicator> data_, controller_;
};

}  // namespace spire::dist
