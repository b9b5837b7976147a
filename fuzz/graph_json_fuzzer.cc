// libFuzzer target: Graph::from_json on arbitrary bytes (and, when it
// parses, the round trip to_json -> from_json must give the same JSON).
#include <cstdlib>
#include <string>

#include "core/graph.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::unique_ptr<spire::Graph> g;
  try {
    g = spire::Graph::from_json(text);
  } catch (const spire::Error&) {
    return 0;  // rejected with a clear error: fine
  }
  const std::string again = g->to_json();
  if (spire::Graph::from_json(again)->to_json() != again) std::abort();  // not a fixed point
  return 0;
}
