// libFuzzer target: the image decoders (train/image_io.h), JPEG and PNG from
// memory. The first byte picks the color order and a small pixel limit (so
// that a header claiming a huge image is rejected instead of exhausting
// libFuzzer's memory limit); the rest is the encoded image.
#include "fuzz/fuzz_util.h"
#include "train/image_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  spire::ImageDecodeOptions options;
  options.order = data[0] & 1 ? spire::ColorOrder::kRGB : spire::ColorOrder::kBGR;
  options.max_pixels = int64_t{1} << (16 + (data[0] >> 1) % 6);  // 64 Ki .. 2 Mi pixels
  try {
    spire::Tensor t = spire::decode_image(data + 1, size - 1, "fuzz.img", options);
    (void)t;
  } catch (const spire::Error&) {
  }
  return 0;
}
