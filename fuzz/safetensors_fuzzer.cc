// libFuzzer target: read_checkpoint (Spire's safetensors reader with CRC32C
// checksums) on arbitrary file contents.
#include "fuzz/fuzz_util.h"
#include "train/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = spire::fuzz::write_file("model.safetensors", data, size);
  try {
    spire::Checkpoint c = spire::read_checkpoint(path);
    for (const auto& [name, t] : c.tensors) (void)t.to_string(4);  // touch what was returned
  } catch (const spire::Error&) {
  }
  return 0;
}
