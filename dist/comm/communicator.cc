// The parts of dist/comm/communicator.h that every implementation shares:
// reduction names, participant checks and the validation of a call.
#include "dist/comm/communicator.h"

#include <cstring>

namespace spire::dist {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMean: return "mean";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
  }
  return "?";
}

ReduceOp parse_reduce_op(const std::string& name, const std::string& what) {
  if (name == "sum") return ReduceOp::kSum;
  if (name == "mean" || name == "average" || name == "avg") return ReduceOp::kMean;
  if (name == "max") return ReduceOp::kMax;
  if (name == "min") return ReduceOp::kMin;
  throw_error(what, ": unknown reduction '", name, "' (expected sum, mean, max or min)");
}

std::string participants_problem(const Communicator& comm, const std::vector<Participant>& parts) {
  const int local = static_cast<int>(comm.devices().size());
  if (parts.empty()) return "called with no participant";
  std::vector<bool> seen(static_cast<size_t>(local), false);
  for (const auto& p : parts) {
    if (p.local < 0 || p.local >= local)
      return str_cat("participant ", p.local, " does not exist (", local, " local participants)");
    if (seen[static_cast<size_t>(p.local)]) return str_cat("participant ", p.local, " appears twice in one call");
    seen[static_cast<size_t>(p.local)] = true;
    const Device& d = comm.devices()[static_cast<size_t>(p.local)];
    for (const Tensor* t : {&p.input, &p.output})
      if (t->defined() && t->device() != d)
        return str_cat("participant ", p.local, " (", d.to_string(), ") passed a tensor on ",
                       t->device().to_string());
  }
  return {};
}

std::string device_list(const std::vector<Device>& devices) {
  std::string s;
  for (size_t i = 0; i < devices.size(); ++i) s += (i ? "," : "") + devices[i].to_string();
  return s;
}

const char* collective_kind_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce: return "allreduce";
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kAllGather: return "allgather";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kBarrier: return "barrier";
  }
  return "?";
}

CollectiveSignature local_signature(CollectiveKind kind, const CollectiveCall& call, ReduceOp op,
                                    int root, int size, const std::vector<Device>& devices,
                                    const std::vector<Participant>& parts, std::string* problem) {
  CollectiveSignature sig;
  sig.kind = kind;
  sig.identity = collective_identity(call);
  sig.op = op;
  sig.root = root;
  problem->clear();
  if (kind == CollectiveKind::kBarrier) return sig;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Participant& p = parts[i];
    const Device& d = devices[static_cast<size_t>(p.local)];
    if (!p.input.defined() || !p.output.defined()) {
      *problem = str_cat("participant ", p.local, " (", d.to_string(), ") passed an undefined tensor");
      return sig;
    }
    if (p.input.dtype() != p.output.dtype()) {
      *problem = str_cat("participant ", p.local, " has input ", p.input.type_string(), " but output ",
                         p.output.type_string());
      return sig;
    }
    const int64_t in = p.input.num_elements(), out = p.output.num_elements();
    int64_t want_out = in;
    if (kind == CollectiveKind::kAllGather) want_out = in * size;
    if (kind == CollectiveKind::kReduceScatter) {
      if (in % size != 0) {
        *problem = str_cat("participant ", p.local, "'s input has ", in,
                           " elements, not a multiple of the ", size, " participants");
        return sig;
      }
      want_out = in / size;
    }
    if (out != want_out) {
      *problem = str_cat("participant ", p.local, " (", d.to_string(), ") has an output of ", out,
                         " elements for an input of ", in, " (expected ", want_out, ")");
      return sig;
    }
    if ((kind == CollectiveKind::kAllReduce || kind == CollectiveKind::kReduceScatter) &&
        p.input.dtype() == DType::Bool) {
      *problem = str_cat("participant ", p.local, " passed bool tensors, which cannot be reduced");
      return sig;
    }
    if (i == 0) {
      sig.dtype = p.input.dtype();
      sig.count = in;
      sig.shape = p.input.shape().dims();
    } else if (p.input.dtype() != sig.dtype || in != sig.count ||
               p.input.shape().dims() != sig.shape) {
      *problem = str_cat("participants ", parts[0].local, " and ", p.local, " of one call pass ",
                         dtype_name(sig.dtype), " x ", sig.count, " and ", p.input.type_string());
      return sig;
    }
  }
  if (kind == CollectiveKind::kBroadcast && (root < 0 || root >= size))
    *problem = str_cat("root ", root, " is not a participant (", size, " participants)");
  return sig;
}

std::string signature_difference(const CollectiveSignature& mine, const CollectiveSignature& first,
                                 int first_participant) {
  const std::string other = str_cat(" where participant ", first_participant, " ");
  const bool data = mine.kind != CollectiveKind::kBarrier;
  if (mine.kind != first.kind || mine.identity != first.identity)
    return str_cat("called ", collective_kind_name(mine.kind), " '", mine.identity, "'", other,
                   "called ", collective_kind_name(first.kind), " '", first.identity, "'");
  if (data && mine.dtype != first.dtype)
    return str_cat("passed ", dtype_name(mine.dtype), other, "passed ", dtype_name(first.dtype));
  if (data && mine.count != first.count)
    return str_cat("passed ", mine.count, " elements", other, "passed ", first.count);
  if (data && mine.shape != first.shape)
    return str_cat("passed ", dtype_name(mine.dtype), Shape(mine.shape).to_string(), other,
                   "passed ", dtype_name(first.dtype), Shape(first.shape).to_string());
  if ((mine.kind == CollectiveKind::kAllReduce || mine.kind == CollectiveKind::kReduceScatter) &&
      mine.op != first.op)
    return str_cat("asked for ", reduce_op_name(mine.op), other, "asked for ", reduce_op_name(first.op));
  if (mine.kind == CollectiveKind::kBroadcast && mine.root != first.root)
    return str_cat("named root ", mine.root, other, "named root ", first.root);
  return {};
}

std::string encode_signature(const CollectiveSignature& sig) {
  const int64_t head[6] = {static_cast<int64_t>(sig.kind), static_cast<int64_t>(sig.op), sig.root,
                           static_cast<int64_t>(sig.dtype), sig.count,
                           static_cast<int64_t>(sig.shape.size())};
  std::string out(reinterpret_cast<const char*>(head), sizeof head);
  if (!sig.shape.empty())
    out.append(reinterpret_cast<const char*>(sig.shape.data()), sig.shape.size() * sizeof(int64_t));
  out += sig.identity;
  return out;
}

bool decode_signature(const std::string& bytes, CollectiveSignature* sig) {
  int64_t head[6];
  if (bytes.size() < sizeof head) return false;
  std::memcpy(head, bytes.data(), sizeof head);
  const int64_t rank = head[5];
  if (rank < 0 || static_cast<size_t>(rank) > (bytes.size() - sizeof head) / sizeof(int64_t))
    return false;
  if (head[0] < 0 || head[0] > static_cast<int64_t>(CollectiveKind::kBarrier) || head[1] < 0 ||
      head[1] > static_cast<int64_t>(ReduceOp::kMin) || head[3] < 0 ||
      head[3] > static_cast<int64_t>(DType::BF16) || head[4] < 0)
    return false;
  sig->kind = static_cast<CollectiveKind>(head[0]);
  sig->op = static_cast<ReduceOp>(head[1]);
  sig->root = static_cast<int>(head[2]);
  sig->dtype = static_cast<DType>(head[3]);
  sig->count = head[4];
  sig->shape.assign(static_cast<size_t>(rank), 0);
  if (rank > 0)  // (an empty vector's data() may be null)
    std::memcpy(sig->shape.data(), bytes.data() + sizeof head, static_cast<size_t>(rank) * sizeof(int64_t));
  for (int64_t d : sig->shape)
    if (d < 0) return false;
  sig->identity = bytes.substr(sizeof head + static_cast<size_t>(rank) * sizeof(int64_t));
  return true;
}

}  // namespace spire::dist
