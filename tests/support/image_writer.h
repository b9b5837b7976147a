// Test support: encodes small images as PNG (libpng) and JPEG (libjpeg)
// bytes, so that the image tests (tests/train/image_io_test.cc,
// imagenet_folder_test.cc) decode files they wrote themselves. Failures
// throw spire::Error (the encoders' error callbacks longjmp back first).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace spire::testing {

using ImageBytes = std::vector<uint8_t>;

/// PNG color types as libpng numbers them.
enum class PngColor { kGray = 0, kRGB = 2, kPalette = 3, kGrayAlpha = 4, kRGBA = 6 };

struct PngSpec {
  int width = 0, height = 0;
  PngColor color = PngColor::kRGB;
  int bit_depth = 8;  // 8 or 16 (1, 2, 4 too for gray and palette)
  bool interlaced = false;
  /// Samples row-major, channels interleaved (for a palette: indices), each
  /// below 2^bit_depth.
  std::vector<uint16_t> samples;
  /// For kPalette: RGB triples.
  std::vector<uint8_t> palette;
};

ImageBytes encode_png(const PngSpec& spec);

/// JPEG of `components` 1 (gray), 3 (RGB) or 4 (CMYK, Adobe-inverted as
/// libjpeg writes it) from interleaved 8-bit samples.
ImageBytes encode_jpeg(int width, int height, int components, const std::vector<uint8_t>& samples,
                       int quality = 95);

void write_bytes_file(const std::string& path, const ImageBytes& bytes);

}  // namespace spire::testing
