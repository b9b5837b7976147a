// A minimal PNG writer for the examples (8-bit grayscale, one zlib-compressed
// IDAT chunk, CRC32 from zlib) and a helper tiling images into a grid.
// Kept in examples/: the library itself does not write images.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace spire_examples {

/// Writes `pixels` (height * width bytes, row-major, 0 = black) as an 8-bit
/// grayscale PNG. Returns false and sets `error` when the file cannot be
/// written or compression fails.
bool write_png_gray8(const std::string& path, int width, int height,
                     const std::vector<uint8_t>& pixels, std::string* error);

/// Tiles `count` images of size h x w (floats, row-major, consecutive) into a
/// rows x cols grid with `pad` pixels of `pad_value` between and around
/// them. Values are mapped from [lo, hi] to 0..255 (clamped). Missing cells
/// stay at pad_value. Returns the grid; its size is written to out_w/out_h.
std::vector<uint8_t> tile_images(const float* images, int count, int h, int w, int rows, int cols,
                                 float lo, float hi, int pad, uint8_t pad_value, int* out_w,
                                 int* out_h);

}  // namespace spire_examples
