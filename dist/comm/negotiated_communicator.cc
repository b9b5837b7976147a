// NegotiatedCommunicator (see negotiated_communicator.h): each call's signature is exchanged
// over the controller (an allgather of fixed-size host slots), compared alike on every rank,
// then the call goes to the data communicator.
#include "dist/comm/negotiated_communicator.h"

#include <cstdio>
#include <cstring>

namespace spire::dist {

namespace {

constexpr size_t kHeadBytes = sizeof(int64_t);  // each slot: the encoding's length, then it

// FNV-1a of `s`, as 16 hex digits.
std::string hash_hex(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// `sig` encoded into at most `budget` bytes: an identity too long to fit is cut, and ends
// with a hash of the whole one.
std::string encode_within(CollectiveSignature sig, size_t budget, const std::string& where) {
  std::string bytes = encode_signature(sig);
  if (bytes.size() <= budget) return bytes;
  const std::string tail = "...#" + hash_hex(sig.identity);
  const size_t fixed = bytes.size() - sig.identity.size() + tail.size();
  if (fixed > budget)
    throw_error(where, ": the collective's signature does not fit the negotiation's ",
                NegotiatedCommunicator::kSignatureBytes, " bytes (a ", sig.shape.size(), "-d shape)");
  sig.identity = sig.identity.substr(0, budget - fixed) + tail;
  return encode_signature(sig);
}

}  // namespace

NegotiatedCommunicator::NegotiatedCommunicator(std::shared_ptr<Communicator> data,
                                               std::shared_ptr<Communicator> controller)
    : data_(std::move(data)), controller_(std::move(controller)) {
  SPIRE_CHECK(data_ && controller_, "NegotiatedCommunicator: the data communicator and the controller must "
              "not be null");
  SPIRE_CHECK(data_->devices().size() == 1 && controller_->devices().size() == 1,
              "NegotiatedCommunicator: ", data_->name(), " and the controller ", controller_->name(),
              " must have one participant per process; they have ", data_->devices().size(), " and ",
              controller_->devices().size());
  SPIRE_CHECK(data_->rank() == controller_->rank() && data_->num_ranks() == controller_->num_ranks(),
              "NegotiatedCommunicator: ", data_->name(), " is rank ", data_->rank(), " of ", data_->num_ranks(),
              " but the controller ", controller_->name(), " is rank ", controller_->rank(), " of ",
              controller_->num_ranks());
  SPIRE_CHECK(controller_->devices()[0].is_cpu(), "NegotiatedCommunicator: the controller ", controller_->name(),
              " must take host tensors (it is on ", controller_->devices()[0].to_string(), ")");
}

std::string NegotiatedCommunicator::name() const {
  return str_cat("negotiated(", data_->name(), ", controller ", controller_->name(), ")");
}

void NegotiatedCommunicator::agree(const std::string& what, const std::vector<std::string>& items) {
  controller_->agree(what, items);
}

void NegotiatedCommunicator::negotiate(const CollectiveSignature& sig, const CollectiveCall& call,
                                       const std::string& where) {
  const int64_t words = kSignatureBytes / static_cast<int64_t>(sizeof(int64_t));
  const std::string mine = encode_within(sig, static_cast<size_t>(kSignatureBytes) - kHeadBytes, where);
  Tensor in(DType::I64, Shape{words}), out(DType::I64, Shape{words * num_ranks()});
  std::memset(in.raw_data(), 0, in.nbytes());
  const int64_t length = static_cast<int64_t>(mine.size());
  std::memcpy(in.raw_data(), &length, kHeadBytes);
  std::memcpy(static_cast<char*>(in.raw_data()) + kHeadBytes, mine.data(), mine.size());
  std::vector<Participant> parts{{0, in, out}};
  CollectiveCall c;
  c.key = call.key;
  c.name = str_cat("negotiate ", call.name);
  c.identity = "negotiation";  // the same on every rank: the signatures are compared below
  c.run = call.run;
  controller_->allgather(c, parts);
  // Every rank holds every signature and compares them alike: all throw the same error.
  const char* all = static_cast<const char*>(out.raw_data());
  auto sig_of = [&](int r) {
    const char* slot = all + static_cast<size_t>(r) * static_cast<size_t>(kSignatureBytes);
    int64_t n = 0;
    std::memcpy(&n, slot, kHeadBytes);
    CollectiveSignature x;
    if (n < 0 || n > kSignatureBytes - static_cast<int64_t>(kHeadBytes) ||
        !decode_signature(std::string(slot + kHeadBytes, static_cast<size_t>(n)), &x))
      x.identity = "(unreadable signature)";
    return x;
  };
  const CollectiveSignature first = sig_of(0);
  for (int r = 1; r < num_ranks(); ++r) {
    std::string diff = signature_difference(sig_of(r), first, 0);
    if (diff.empty()) continue;
    // "participant 0" in the shared wording is rank 0 here.
    const std::string from = "participant 0";
    const size_t at = diff.find(from);
    if (at != std::string::npos) diff.replace(at, from.size(), "rank 0");
    throw CollectiveMismatch(str_cat(where, ": ranks disagree: rank ", r, " ", diff));
  }
}

void NegotiatedCommunicator::run(CollectiveKind kind, const CollectiveCall& call, std::vector<Participant>& parts,
                                 ReduceOp op, int root) {
  const std::string where = str_cat(collective_kind_name(kind), " '", call.name, "' on ", name());
  std::string problem;
  if (kind != CollectiveKind::kBarrier) {
    problem = participants_problem(*this, parts);
    if (!problem.empty()) throw_error(where, ": ", problem);
  }
  const CollectiveSignature sig = local_signature(kind, call, op, root, size(), devices(), parts, &problem);
  if (!problem.empty()) throw_error(where, ": ", problem);
  negotiate(sig, call, where);
  switch (kind) {
    case CollectiveKind::kAllReduce: data_->allreduce(call, parts, op); break;
    case CollectiveKind::kBroadcast: data_->broadcast(call, parts, root); break;
    case CollectiveKind::kAllGather: data_->allgather(call, parts); break;
    case CollectiveKind::kReduceScatter: data_->reduce_scatter(call, parts, op); break;
    case CollectiveKind::kBarrier: data_->barrier(call, parts); break;
  }
}

}  // namespace spire::dist
