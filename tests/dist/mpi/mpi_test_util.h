// Test support for the MPI tests (spire_mpi_tests): every rank's value of
// an integer, through a fresh communicator; a rank's exact-sum input and a
// named collective call.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "dist/mpi/mpi_communicator.h"

namespace spire::testing {

/// Rank r's input: (r + 1) * (i % 13 + 1) (small integers: every sum is exact).
inline Tensor input(DType dt, int64_t n, int r) {
  Tensor t(dt, Shape{n});
  visit_dtype(dt, "fill", [&](auto zero) {
    using T = decltype(zero);
    if constexpr (!std::is_same_v<T, bool>)
      for (int64_t i = 0; i < n; ++i) t.data<T>()[i] = static_cast<T>((r + 1) * (i % 13 + 1));
  });
  return t;
}

/// A collective call named `name` (outside a session run).
inline dist::CollectiveCall call(const std::string& name) {
  dist::CollectiveCall c;
  c.name = name;
  return c;
}

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
