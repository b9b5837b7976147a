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
  Bundle b;
  const int64_t n = r.get_i64();
  for (int64_t i = 0; i < n; ++i) {
    std::string name = r.get_string();
    const auto dt = static_cast<DType>(r.get_i64());
    const int64_t rank = r.get_i64();
    SPIRE_CHECK(rank >= 0 && rank < 64, what, ": a malformed tensor '", name, "'");
    std::vector<int64_t> dims;
    for (int64_t d = 0; d < rank; ++d) dims.push_back(r.get_i64());
    Tensor t(dt, Shape(dims));
    const int64_t nb = r.get_i64();
    SPIRE_CHECK(nb == static_cast<int64_t>(t.nbytes()), what, ": '", name, "' has ", nb, " bytes, expected ",
                t.nbytes());
    std::memcpy(t.raw_data(), r.get_bytes(t.nbytes()), t.nbytes());
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
