// PNG writing for the examples: signature, IHDR, one IDAT (zlib compress of
// the filter-0 scanlines) and IEND, each chunk with its CRC32.
#include "image_util.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace spire_examples {

namespace {

void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  out.push_back(static_cast<uint8_t>(v >> 24));
  out.push_back(static_cast<uint8_t>(v >> 16));
  out.push_back(static_cast<uint8_t>(v >> 8));
  out.push_back(static_cast<uint8_t>(v));
}

void put_chunk(std::vector<uint8_t>& out, const char type[4], const std::vector<uint8_t>& data) {
  put_u32(out, static_cast<uint32_t>(data.size()));
  size_t start = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data.begin(), data.end());
  uLong crc = crc32(0L, Z_NULL, 0);
  crc = crc32(crc, out.data() + start, static_cast<uInt>(out.size() - start));
  put_u32(out, static_cast<uint32_t>(crc));
}

}  // namespace

bool write_png_gray8(const std::string& path, int width, int height,
                     const std::vector<uint8_t>& pixels, std::string* error) {
  auto fail = [&](const std::string& why) {
    if (error) *error = "write_png_gray8(" + path + "): " + why;
    return false;
  };
  if (width <= 0 || height <= 0) return fail("empty image");
  if (pixels.size() != static_cast<size_t>(width) * height)
    return fail("expected " + std::to_string(static_cast<size_t>(width) * height) +
                " pixels, got " + std::to_string(pixels.size()));
  // Scanlines, each prefixed by filter type 0 (None).
  std::vector<uint8_t> raw;
  raw.reserve(static_cast<size_t>(width + 1) * height);
  for (int y = 0; y < height; ++y) {
    raw.push_back(0);
    raw.insert(raw.end(), pixels.begin() + static_cast<size_t>(y) * width,
               pixels.begin() + static_cast<size_t>(y + 1) * width);
  }
  uLongf zlen = compressBound(static_cast<uLong>(raw.size()));
  std::vector<uint8_t> z(zlen);
  if (compress(z.data(), &zlen, raw.data(), static_cast<uLong>(raw.size())) != Z_OK)
    return fail("zlib compress failed");
  z.resize(zlen);

  std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  std::vector<uint8_t> ihdr;
  put_u32(ihdr, static_cast<uint32_t>(width));
  put_u32(ihdr, static_cast<uint32_t>(height));
  ihdr.push_back(8);  // bit depth
  ihdr.push_back(0);  // color type: grayscale
  ihdr.push_back(0);  // compression: deflate
  ihdr.push_back(0);  // filter method 0
  ihdr.push_back(0);  // no interlace
  put_chunk(png, "IHDR", ihdr);
  put_chunk(png, "IDAT", z);
  put_chunk(png, "IEND", {});

  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return fail("cannot open for writing");
  bool ok = std::fwrite(png.data(), 1, png.size(), f) == png.size();
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) return fail("write failed");
  return true;
}

std::vector<uint8_t> tile_images(const float* images, int count, int h, int w, int rows, int cols,
                                 float lo, float hi, int pad, uint8_t pad_value, int* out_w,
                                 int* out_h) {
  const int gw = cols * w + (cols + 1) * pad;
  const int gh = rows * h + (rows + 1) * pad;
  std::vector<uint8_t> grid(static_cast<size_t>(gw) * gh, pad_value);
  const float scale = hi > lo ? 255.0f / (hi - lo) : 0.0f;
  for (int i = 0; i < std::min(count, rows * cols); ++i) {
    const int r = i / cols, c = i % cols;
    const float* img = images + static_cast<size_t>(i) * h * w;
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) {
        float v = (img[y * w + x] - lo) * scale;
        v = std::isfinite(v) ? std::min(255.0f, std::max(0.0f, v)) : 0.0f;
        grid[static_cast<size_t>(pad + r * (h + pad) + y) * gw + pad + c * (w + pad) + x] =
            static_cast<uint8_t>(std::lround(v));
      }
  }
  if (out_w) *out_w = gw;
  if (out_h) *out_h = gh;
  return grid;
}

}  // namespace spire_examples
