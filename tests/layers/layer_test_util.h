// Helpers shared by the layer tests: tensor value lists, a default-graph
// environment, an initialized session and name lookups.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "layers/layers.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {

/// The elements of `t` as doubles.
inline std::vector<double> vals(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.num_elements()));
  for (int64_t i = 0; i < t.num_elements(); ++i) v[static_cast<size_t>(i)] = t.element_as_double(i);
  return v;
}

inline Tensor f64(const Shape& s, const std::vector<double>& v) {
  return Tensor::from_vector<double>(s, v);
}

/// A fresh graph that is the default graph while alive.
struct GraphEnv {
  Graph g;
  DefaultGraphGuard guard{g};
};

/// A session with every variable initialized.
inline std::unique_ptr<Session> init_session(Graph& g) {
  auto s = std::make_unique<Session>(g);
  s->run_targets({global_variables_initializer(&g)});
  return s;
}

/// The node named `name` (a test failure when absent).
inline Node* var_node(Graph& g, const std::string& name) {
  Node* n = g.find_node(name);
  EXPECT_NE(n, nullptr) << "no node " << name;
  return n;
}

inline std::vector<std::string> names_of(const std::vector<Output>& outs) {
  std::vector<std::string> v;
  for (const Output& o : outs) v.push_back(o.node->name());
  return v;
}

}  // namespace spire::testing
