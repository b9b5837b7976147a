// JSON serialization of a Graph (Graph::to_json / Graph::from_json).
// Tensor attributes store their raw little-endian bytes as hex so that
// every value (NaN and infinities included) round-trips exactly.
#include <nlohmann/json.hpp>

#include <cstdint>

#include "core/graph.h"
#include "core/op_registry.h"

namespace spire {

using nlohmann::json;

namespace {

std::string to_hex(const void* data, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s(n * 2, '0');
  auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = digits[p[i] >> 4];
    s[2 * i + 1] = digits[p[i] & 15];
  }
  return s;
}

void from_hex(const std::string& s, void* data, size_t n) {
  SPIRE_CHECK(s.size() == 2 * n, "graph JSON: tensor data has ", s.size() / 2, " bytes, expected ",
              n);
  auto nibble = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    throw_error("graph JSON: bad hex digit in tensor data");
  };
  auto* p = static_cast<unsigned char*>(data);
  for (size_t i = 0; i < n; ++i)
    p[i] = static_cast<unsigned char>(nibble(s[2 * i]) * 16 + nibble(s[2 * i + 1]));
}

json attr_to_json(const AttrValue& a) {
  json j;
  j["type"] = a.type_name();
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
          j["value"] = nullptr;
        } else if constexpr (std::is_same_v<T, DType>) {
          j["value"] = dtype_name(v);
        } else if constexpr (std::is_same_v<T, Shape>) {
          j["value"] = v.dims();
        } else if constexpr (std::is_same_v<T, Tensor>) {
          Tensor h = v.to(Device::cpu());
          j["value"] = {{"dtype", dtype_name(h.dtype())},
                        {"shape", h.shape().dims()},
                        {"hex", to_hex(h.raw_data(), h.nbytes())}};
        } else {
          j["value"] = v;
        }
      },
      a.value());
  return j;
}

// An integer from JSON without undefined behaviour: nlohmann's get<int64_t>()
// converts a floating-point or out-of-range number with a C++ cast, which is
// undefined for values that do not fit. Only integral numbers that fit pass.
int64_t json_int(const json& v, const char* what) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      throw_error("graph JSON: ", what, " ", v.dump(), " does not fit in a 64-bit integer");
    return v.get<int64_t>();
  }
  throw_error("graph JSON: ", what, " must be an integer, got ", v.dump().substr(0, 64));
}

std::vector<int64_t> json_ints(const json& v, const char* what) {
  if (!v.is_array()) throw_error("graph JSON: ", what, " must be a list of integers");
  std::vector<int64_t> out;
  out.reserve(v.size());
  for (const json& e : v) out.push_back(json_int(e, what));
  return out;
}

Shape json_shape(const json& v, const char* what) {
  std::vector<int64_t> dims = json_ints(v, what);
  for (int64_t d : dims)
    if (d < -1) throw_error("graph JSON: ", what, " has dimension ", d, " (expected >= 0, or -1 for unknown)");
  return Shape(std::move(dims));
}

AttrValue attr_from_json(const json& j) {
  std::string type = j.at("type").get<std::string>();
  const json& v = j.at("value");
  if (type == "int") return AttrValue(json_int(v, "int attribute"));
  if (type == "float") return AttrValue(v.is_null() ? std::nan("") : v.get<double>());
  if (type == "bool") return AttrValue(v.get<bool>());
  if (type == "string") return AttrValue(v.get<std::string>());
  if (type == "ints") return AttrValue(json_ints(v, "ints attribute"));
  if (type == "floats") return AttrValue(v.get<std::vector<double>>());
  if (type == "strings") return AttrValue(v.get<std::vector<std::string>>());
  if (type == "dtype") return AttrValue(dtype_from_name(v.get<std::string>()));
  if (type == "shape") return AttrValue(json_shape(v, "shape attribute"));
  if (type == "tensor") {
    Shape shape = json_shape(v.at("shape"), "tensor shape");
    SPIRE_CHECK(shape.is_fully_defined(), "graph JSON: a tensor attribute needs a fully defined shape, got ",
                shape.to_string());
    const std::string& hex = v.at("hex").get_ref<const std::string&>();
    DType dtype = dtype_from_name(v.at("dtype").get<std::string>());
    // Check the size against the data before allocating (a huge shape must not allocate).
    SPIRE_CHECK(shape.num_bytes(dtype_size(dtype)) * 2 == hex.size(),
                "graph JSON: tensor data has ", hex.size() / 2, " bytes, but ", dtype_name(dtype),
                shape.to_string(), " needs ", shape.num_bytes(dtype_size(dtype)), " bytes");
    Tensor t(dtype, shape);
    from_hex(v.at("hex").get<std::string>(), t.raw_data(), t.nbytes());
    return AttrValue(t);
  }
  if (type == "none") return AttrValue();
  throw_error("graph JSON: unknown attribute type '", type, "'");
}

}  // namespace

std::string Graph::to_json() const {
  json nodes = json::array();
  for (const auto& n : nodes_) {
    json jn;
    jn["name"] = n->name();
    jn["op"] = n->op_type();
    json ins = json::array();
    for (const auto& in : n->inputs()) ins.push_back(in.name());
    jn["inputs"] = ins;
    json ctrl = json::array();
    for (Node* c : n->control_inputs()) ctrl.push_back(c->name());
    jn["control_inputs"] = ctrl;
    json attrs = json::object();
    for (const auto& [k, v] : n->attrs()) attrs[k] = attr_to_json(v);
    jn["attrs"] = attrs;
    jn["device"] = n->device().to_string();
    nodes.push_back(jn);
  }
  json g;
  g["format"] = "spire-graph";
  g["version"] = 1;
  g["seed"] = seed_;
  g["nodes"] = nodes;
  return g.dump(1);
}

std::unique_ptr<Graph> Graph::from_json(const std::string& text) {
  json g;
  try {
    g = json::parse(text);
  } catch (const json::exception& e) {
    throw_error("graph JSON: parse error: ", e.what());
  }
  auto graph = std::make_unique<Graph>();
  try {
    SPIRE_CHECK(g.value("format", "") == "spire-graph",
                "graph JSON: missing or wrong \"format\" (expected \"spire-graph\")");
    graph->seed_ = g.contains("seed") ? json_int(g.at("seed"), "seed") : 0;
    const json& nodes = g.at("nodes");
    for (const json& jn : nodes) {
      std::string name = jn.at("name").get<std::string>();
      std::vector<Output> inputs;
      for (const json& in : jn.at("inputs")) inputs.push_back(graph->output_by_name(in.get<std::string>()));
      AttrMap attrs;
      for (const auto& [k, v] : jn.at("attrs").items()) attrs[k] = attr_from_json(v);
      DeviceScope ds(*graph, Device::parse(jn.value("device", "cpu")));
      Node* n = graph->add_node(jn.at("op").get<std::string>(), inputs, attrs, name);
      SPIRE_CHECK(n->name() == name, "graph JSON: duplicate node name '", name, "'");
    }
    for (const json& jn : nodes) {
      Node* n = graph->find_node(jn.at("name").get<std::string>());
      for (const json& c : jn.at("control_inputs")) {
        Node* dep = graph->find_node(c.get<std::string>());
        SPIRE_CHECK(dep, "graph JSON: unknown control input '", c.get<std::string>(), "'");
        n->add_control_input(dep);
      }
    }
  } catch (const json::exception& e) {
    throw_error("graph JSON: malformed graph: ", e.what());
  }
  return graph;
}

}  // namespace spire
