// Uses the installed Spire: builds y = 2x + 1, runs it and checks the result.
// It takes symbols from spire_core only, yet runs CPU kernels: the kernel
// library's registrations ran although nothing here names it.
#include <spire.h>
#include <spire/core/session.h>

#include <iostream>

int main() {
  spire::Graph g;
  spire::DefaultGraphGuard guard(g);
  auto x = spire::ops::placeholder(spire::DType::F32, {2}, "x");
  auto y = x * 2.0 + 1.0;
  auto dy = spire::gradient(spire::ops::sum(y), x);
  spire::Session s(g);
  auto r = s.run({y, dy}, {{x, spire::Tensor::from_vector<float>({2}, {1, 3})}});
  auto v = r[0].to_vector<float>();
  auto d = r[1].to_vector<float>();
  if (v[0] != 3 || v[1] != 7 || d[0] != 2 || d[1] != 2) {
    std::cerr << "wrong result " << r[0].to_string() << " " << r[1].to_string() << "\n";
    return 1;
  }
  std::cout << "consumer ok: " << r[0].to_string() << "\n";
  return 0;
}
