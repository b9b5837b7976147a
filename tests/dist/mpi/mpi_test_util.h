// Test support for the MPI tests (spire_mpi_tests): every rank's value of
// an integer, through a fresh communicator.
#pragma once

#include <cstdint>
#include <vector>

#include "dist/mpi/mpi_communicator.h"

namespace spire::testing {

/// Every rank's `x`, in rank order (an allgather every rank must call).
inline std::vector<int64_t> gather_from_ranks(int64_t x) {
  dist::MpiCommunicator comm;
  Tensor in(DType::I64, Shape{1}), out(DType::I64, Shape{comm.num_ranks()});
  in.data<int64_t>()[0] = x;
  std::vector<dist::Participant> p{{0, in, out}};
  dist::CollectiveCall c;
  c.name = "gather";
  comm.allgather(c, p);
  return out.to_vector<int64_t>();
}

}  // namespace spire::testing
