#include "train/callbacks.h"

namespace spire {

// Placeholder until the built-in callbacks land (being written now).
std::vector<CallbackPtr> default_callbacks() { return {}; }

}  // namespace spire
