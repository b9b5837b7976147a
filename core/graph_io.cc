// JSON serialization of a Graph (Graph::to_json / Graph::from_json).
// Tensor attributes store their raw little-endian bytes as hex so that
// every value (NaN and infinities included) round-trips exactly.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/graph.h"
#include "core/op_registry.h"

namespace spire {

using nlohmann::json;

namespace {

// The format to_json writes; from_json refuses newer ones.
constexpr int64_t kGraphFormatVersion = 1;

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

// What a JSON value is, in words, for errors ("a string", "the number 2.5").
std::string describe(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::object: return "an object";
    case json::value_t::array: return "a list";
    case json::value_t::string: return "the string " + v.dump().substr(0, 64);
    case json::value_t::boolean: return v.get<bool>() ? "true" : "false";
    default: return "the number " + v.dump().substr(0, 64);
  }
}

// An integer from JSON without undefined behaviour: nlohmann's get<int64_t>()
// converts a floating-point or out-of-range number with a C++ cast, which is
// undefined for values that do not fit. Only integral numbers that fit pass.
int64_t json_int(const json& v, const std::string& what) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      throw_error("graph JSON: ", what, " ", v.dump(), " does not fit in a 64-bit integer");
    return v.get<int64_t>();
  }
  throw_error("graph JSON: ", what, " must be an integer, got ", v.dump().substr(0, 64));
}

std::vector<int64_t> json_ints(const json& v, const std::string& what) {
  if (!v.is_array()) throw_error("graph JSON: ", what, " must be a list of integers, got ", describe(v));
  std::vector<int64_t> out;
  out.reserve(v.size());
  for (const json& e : v) out.push_back(json_int(e, what));
  return out;
}

Shape json_shape(const json& v, const std::string& what) {
  std::vector<int64_t> dims = json_ints(v, what);
  for (int64_t d : dims)
    if (d < -1) throw_error("graph JSON: ", what, " has dimension ", d, " (expected >= 0, or -1 for unknown)");
  return Shape(std::move(dims));
}

const std::string& json_string(const json& v, const std::string& what) {
  if (!v.is_string()) throw_error("graph JSON: ", what, " must be a string, got ", describe(v));
  return v.get_ref<const std::string&>();
}

// A number, or null for NaN (how to_json writes NaN and the infinities).
double json_double(const json& v, const std::string& what) {
  if (v.is_null()) return std::nan("");
  if (!v.is_number()) throw_error("graph JSON: ", what, " must be a number, got ", describe(v));
  return v.get<double>();
}

// Member `key` of object `j` (`what` names j), which must be there.
const json& member(const json& j, const char* key, const std::string& what) {
  auto it = j.find(key);
  if (it == j.end()) throw_error("graph JSON: malformed ", what, ": it has no \"", key, "\"");
  return *it;
}

const json& json_list(const json& v, const std::string& what) {
  if (!v.is_array()) throw_error("graph JSON: ", what, " must be a list, got ", describe(v));
  return v;
}

// An attribute's value; the caller's errors name the node and the attribute.
AttrValue attr_from_json(const json& j) {
  if (!j.is_object())
    throw_error("graph JSON: malformed attribute: expected an object {\"type\": ..., \"value\": ...}, got ",
                describe(j));
  const std::string& type = json_string(member(j, "type", "attribute"), "its \"type\"");
  const json& v = member(j, "value", "attribute");
  const std::string what = type + " attribute";
  if (type == "int") return AttrValue(json_int(v, what));
  if (type == "float") return AttrValue(json_double(v, what));
  if (type == "bool") {
    if (!v.is_boolean()) throw_error("graph JSON: ", what, " must be true or false, got ", describe(v));
    return AttrValue(v.get<bool>());
  }
  if (type == "string") return AttrValue(json_string(v, what));
  if (type == "ints") return AttrValue(json_ints(v, what));
  if (type == "floats") {
    std::vector<double> out;
    for (const json& e : json_list(v, what)) out.push_back(json_double(e, what + " element"));
    return AttrValue(std::move(out));
  }
  if (type == "strings") {
    std::vector<std::string> out;
    for (const json& e : json_list(v, what)) out.push_back(json_string(e, what + " element"));
    return AttrValue(std::move(out));
  }
  if (type == "dtype") {
    // "invalid": an unset dtype attr (e.g. MatMul's compute_dtype), written as dtype_name does.
    const std::string name = json_string(v, what);
    return AttrValue(name == dtype_name(DType::Invalid) ? DType::Invalid : dtype_from_name(name));
  }
  if (type == "shape") return AttrValue(json_shape(v, what));
  if (type == "tensor") {
    if (!v.is_object())
      throw_error("graph JSON: malformed ", what, ": expected {\"dtype\", \"shape\", \"hex\"}, got ", describe(v));
    Shape shape = json_shape(member(v, "shape", what), what + " shape");
    SPIRE_CHECK(shape.is_fully_defined(), "graph JSON: ", what, " needs a fully defined shape, got ",
                shape.to_string());
    const std::string& hex = json_string(member(v, "hex", what), what + " \"hex\"");
    DType dtype = dtype_from_name(json_string(member(v, "dtype", what), what + " \"dtype\""));
    // Check the size against the data before allocating (a huge shape must not allocate).
    SPIRE_CHECK(shape.num_bytes(dtype_size(dtype)) * 2 == hex.size(),
                "graph JSON: ", what, ": tensor data has ", hex.size() / 2, " bytes, but ", dtype_name(dtype),
                shape.to_string(), " needs ", shape.num_bytes(dtype_size(dtype)), " bytes");
    Tensor t(dtype, shape);
    from_hex(hex, t.raw_data(), t.nbytes());
    return AttrValue(t);
  }
  if (type == "none") return AttrValue();
  throw_error("graph JSON: unknown attribute type '", type,
              "' (expected int, float, bool, string, ints, floats, strings, dtype, shape, tensor or none)");
}

// "line 3, column 7" of byte offset `pos` (0-based) in `text`.
std::string line_and_column(const std::string& text, size_t pos) {
  pos = std::min(pos, text.size());
  size_t line = 1, col = 1;
  for (size_t i = 0; i < pos; ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return str_cat("line ", line, ", column ", col);
}

// The line of byte `pos` up to and including it (at most its last 30
// bytes), unprintable bytes as '?'.
std::string line_up_to(const std::string& text, size_t pos) {
  if (text.empty()) return "";
  pos = std::min(pos, text.size() - 1);
  // (A newline is shown as '?' at the end of its line.)
  size_t from = pos == 0 ? std::string::npos : text.rfind('\n', pos - 1);
  from = from == std::string::npos ? 0 : from + 1;
  if (pos + 1 - from > 30) from = pos + 1 - 30;
  std::string out;
  for (size_t i = from; i <= pos; ++i) {
    auto c = static_cast<unsigned char>(text[i]);
    out += (c >= 32 && c < 127) ? static_cast<char>(c) : '?';
  }
  return out;
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
  g["version"] = kGraphFormatVersion;
  g["seed"] = seed_;
  g["nodes"] = nodes;
  return g.dump(1);
}

std::unique_ptr<Graph> Graph::from_json(const std::string& text) {
  json g;
  try {
    g = json::parse(text);
  } catch (const json::parse_error& e) {
    // e.byte is 1-based: the byte where the parser gave up.
    const size_t at = e.byte > 0 ? e.byte - 1 : 0;
    if (at >= text.size())
      throw_error("graph JSON: parse error at ", line_and_column(text, at), ": the text ends early");
    throw_error("graph JSON: parse error at ", line_and_column(text, at), ": not valid JSON: '",
                line_up_to(text, at), "' <- here");
  } catch (const json::exception&) {
    throw_error("graph JSON: parse error: not valid JSON");
  }
  SPIRE_CHECK(g.is_object(), "graph JSON: malformed graph: expected an object {\"format\": \"spire-graph\", ...}, got ",
              describe(g));
  auto graph = std::make_unique<Graph>();
  try {
    SPIRE_CHECK(g.contains("format") && g.at("format") == "spire-graph",
                "graph JSON: missing or wrong \"format\" (expected \"spire-graph\")");
    // A file without "version" is of the first format.
    if (g.contains("version")) {
      const int64_t version = json_int(g.at("version"), "\"version\"");
      SPIRE_CHECK(version >= 1, "graph JSON: bad format version ", version, " (versions start at 1)");
      SPIRE_CHECK(version <= kGraphFormatVersion, "graph JSON: format version ", version,
                  " is newer than this Spire supports (", kGraphFormatVersion, ")");
    }
    graph->seed_ = g.contains("seed") ? json_int(g.at("seed"), "seed") : 0;
    const json& nodes = json_list(member(g, "nodes", "graph"), "\"nodes\"");
    std::vector<Node*> made;
    for (size_t i = 0; i < nodes.size(); ++i) {
      const json& jn = nodes[i];
      std::string where = str_cat("nodes[", i, "]");
      if (!jn.is_object()) throw_error("graph JSON: malformed ", where, ": expected an object, got ", describe(jn));
      const std::string& name = json_string(member(jn, "name", "node " + where), where + " \"name\"");
      where = str_cat("node '", name, "' (nodes[", i, "])");
      const std::string& op = json_string(member(jn, "op", where), where + " \"op\"");
      std::vector<Output> inputs;
      for (const json& in : json_list(member(jn, "inputs", where), where + " \"inputs\"")) {
        const std::string& input = json_string(in, where + " input");
        try {
          inputs.push_back(graph->output_by_name(input));
        } catch (const Error& e) {
          throw_error("graph JSON: ", where, " input '", input, "': ", e.what(),
                      " (a node's inputs must come before it)");
        }
      }
      const json& jattrs = member(jn, "attrs", where);
      if (!jattrs.is_object()) throw_error("graph JSON: ", where, " \"attrs\" must be an object, got ", describe(jattrs));
      AttrMap attrs;
      for (const auto& [k, v] : jattrs.items()) {
        try {
          attrs[k] = attr_from_json(v);
        } catch (const Error& e) {
          std::string msg = e.what();
          if (msg.rfind("graph JSON: ", 0) == 0) msg = msg.substr(12);
          throw_error("graph JSON: ", where, ", attribute '", k, "': ", msg);
        }
      }
      Device device = Device::cpu();
      if (jn.contains("device")) {
        const std::string& spec = json_string(jn.at("device"), where + " \"device\"");
        try {
          device = Device::parse(spec);
        } catch (const Error& e) {
          throw_error("graph JSON: ", where, ": ", e.what());
        }
      }
      DeviceScope ds(*graph, device);
      Node* n = graph->add_node(op, inputs, attrs, name);
      SPIRE_CHECK(n->name() == name, "graph JSON: duplicate node name '", name, "' (nodes[", i, "])");
      made.push_back(n);
    }
    for (size_t i = 0; i < nodes.size(); ++i) {
      const std::string where = str_cat("node '", made[i]->name(), "' (nodes[", i, "])");
      for (const json& c : json_list(member(nodes[i], "control_inputs", where), where + " \"control_inputs\"")) {
        const std::string& dep_name = json_string(c, where + " control input");
        Node* dep = graph->find_node(dep_name);
        SPIRE_CHECK(dep, "graph JSON: ", where, ": unknown control input '", dep_name, "'");
        made[i]->add_control_input(dep);
      }
    }
  } catch (const json::exception&) {
    // Every access above is checked first; this is a safety net, never the JSON library's words.
    throw_error("graph JSON: malformed graph");
  }
  return graph;
}

}  // namespace spire
