// The parameter-server protocol (see ps_protocol.h).
#include "dist/trainers/ps_protocol.h"

#include <cstring>

#include "core/error.h"

namespace spire::ps {

const char* kind_name(int64_t kind) {
  switch (kind) {
    case kSync: return "the initial synchronization";
    case kChiefValues: return "an agreement on the chief's values (the loop)";
    case kPush: return "a gradient push";
    case kDone: return "the end of training";
    case kPull: return "a state pull";
    case kSetModel: return "a model-variable update";
    default: return "an unknown request";
  }
}

bool is_round(int64_t kind) { return kind == kSync || kind == kChiefValues || kind == kPush; }

std::vector<char> request(int64_t kind, int64_t step, const std::vector<char>& payload) {
  dist::MessageWriter w;
  w.put_i64(kind);
  w.put_i64(step);
  w.put_bytes(payload.data(), payload.size());
  return std::move(w.data());
}

std::vector<char> reply(int64_t status, int64_t kind, int64_t step, const std::vector<char>& payload) {
  dist::MessageWriter w;
  w.put_i64(status);
  w.put_i64(kind);
  w.put_i64(step);
  w.put_bytes(payload.data(), payload.size());
  return std::move(w.data());
}

std::string describe(const Output& v) {
  return str_cat(v.node->name(), " ", dtype_name(v.dtype()), v.shape().to_string());
}

void put_raw(dist::MessageWriter& w, const Tensor& t) {
  const Tensor h = t.device().is_cpu() ? t : t.to(Device::cpu());
  w.put_i64(static_cast<int64_t>(h.nbytes()));
  w.put_bytes(h.raw_data(), h.nbytes());
}

Tensor get_raw(dist::MessageReader& r, const Output& like, const std::string& what) {
  Tensor t(like.dtype(), like.shape());
  const int64_t n = r.get_i64();
  SPIRE_CHECK(n == static_cast<int64_t>(t.nbytes()), what, ": ", n, " bytes for ", describe(like), ", expected ",
              t.nbytes());
  std::memcpy(t.raw_data(), r.get_bytes(t.nbytes()), t.nbytes());
  return t;
}

void put_bundle(dist::MessageWriter& w, const Bundle& b) {
  w.put_i64(static_cast<int64_t>(b.size()));
  for (const auto& [name, t] : b) {
    w.put_string(name);
    w.put_i64(static_cast<int64_t>(t.dtype()));
    w.put_i64(t.shape().rank());
    for (int i = 0; i < t.shape().rank(); ++i) w.put_i64(t.shape().dim(i));
    put_raw(w, t);
  }
}

Bundle get_bundle(dist::MessageReader& r, const std::string& what) {
  // Everything the peer says is checked against the message before anything is
  // allocated: a malformed or truncated message is an error naming it, never a huge
  // allocation or a read past its end.
  Bundle b;
  const int64_t n = r.get_i64();
  // (Each tensor takes at least its name's length, dtype, rank and byte count: 32 bytes.)
  SPIRE_CHECK(n >= 0 && static_cast<uint64_t>(n) <= r.remaining() / 32, what, ": a malformed message (", n,
              " tensors in ", r.remaining(), " bytes)");
  for (int64_t i = 0; i < n; ++i) {
    std::string name = r.get_string();
    const int64_t code = r.get_i64();
    SPIRE_CHECK(code >= static_cast<int64_t>(DType::F32) && code <= static_cast<int64_t>(DType::BF16), what,
                ": tensor '", name, "' has an unknown dtype code ", code);
    const auto dt = static_cast<DType>(code);
    const int64_t rank = r.get_i64();
    SPIRE_CHECK(rank >= 0 && rank < 64, what, ": tensor '", name, "' has rank ", rank);
    std::vector<int64_t> dims;
    // The bytes the shape needs, without overflow: at most what the message holds.
    const uint64_t limit = r.remaining();
    uint64_t bytes = dtype_size(dt);
    bool too_large = false;
    for (int64_t d = 0; d < rank; ++d) {
      const int64_t dim = r.get_i64();
      SPIRE_CHECK(dim >= 0, what, ": tensor '", name, "' has dimension ", d, " = ", dim);
      dims.push_back(dim);
      if (too_large) continue;
      if (bytes != 0 && static_cast<uint64_t>(dim) > limit / bytes) too_large = true;
      else bytes *= static_cast<uint64_t>(dim);
    }
    // (A zero among them does not make such a shape acceptable: it is rejected all the same.)
    SPIRE_CHECK(!too_large, what, ": tensor '", name, "' (", dtype_name(dt), ", ", rank,
                " dimensions) needs more than the message holds");
    const int64_t nb = r.get_i64();
    SPIRE_CHECK(bytes <= limit && nb == static_cast<int64_t>(bytes), what, ": tensor '", name, "' (",
                dtype_name(dt), Shape(dims).to_string(), ") has ", nb, " bytes where its shape needs ",
                bytes > limit ? std::string("more than the message holds") : std::to_string(bytes));
    SPIRE_CHECK(static_cast<uint64_t>(nb) <= r.remaining(), what, ": tensor '", name, "' is cut short (", nb,
                " bytes, ", r.remaining(), " left in the message)");
    Tensor t(dt, Shape(dims));
    if (nb > 0) std::memcpy(t.raw_data(), r.get_bytes(static_cast<size_t>(nb)), static_cast<size_t>(nb));
    b.emplace_back(std::move(name), std::move(t));
  }
  return b;
}

std::string Shard::signature() const {
  std::string s;
  for (const Output& v : vars) s += describe(v) + ";";
  s += "|";
  for (const Output& v : model_vars) s += describe(v) + ";";
  return s;
}

Output Cluster::variable(const std::string& name, const std::string& what) const {
  auto it = by_name.find(name);
  SPIRE_CHECK(it != by_name.end(), kind, ": ", what, " names variable '", name,
              "', which this rank's graph does not have (the ranks built different models?)");
  return it->second;
}

std::vector<Output> Cluster::slots_of(const Output& v) const {
  std::vector<Output> out;
  for (const std::string& s : opt->get_slot_names()) {
    Output slot = opt->get_slot(v, s);
    if (slot.node) out.push_back(slot);
  }
  return out;
}

}  // namespace spire::ps
