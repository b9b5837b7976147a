// libFuzzer target: read_checkpoint_index (the JSON index of a training
// directory) and latest_checkpoint on arbitrary file contents.
#include "fuzz/fuzz_util.h"
#include "train/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  spire::fuzz::write_file(spire::kCheckpointIndexName, data, size);
  try {
    auto index = spire::read_checkpoint_index(spire::fuzz::scratch_dir());
    if (index) (void)spire::latest_checkpoint(spire::fuzz::scratch_dir());
  } catch (const spire::Error&) {
  }
  return 0;
}
