// Helpers shared by the layer implementations (layers.cc, batch_norm.cc):
// error descriptions naming the layer, input checks, and the per-layer
// set-up (default graph of the input, variable scope). Internal to layers/.
#pragma once

#include <string>

#include "core/error.h"
#include "core/graph.h"
#include "layers/layers.h"

namespace spire::layer_detail {

/// "Conv2D 'conv0' (input f32[2, 5, 5, 3])".
std::string describe(const char* kind, const std::string& name, const Output& x);

/// Checks the name is non-empty, x is valid and floating; throws naming the layer.
void check_input(const char* kind, const std::string& name, const Output& x);

/// Resolved padding in upper case ("SAME"/"VALID"); throws otherwise.
std::string normalize_padding(const char* kind, const std::string& name, const Output& x,
                              const std::string& padding);

/// Training flag of a layer: explicit/argscope value, else the tower
/// context's is_training, else true outside any tower.
bool resolve_training(Graph& g, const std::optional<bool>& training);

}  // namespace spire::layer_detail
