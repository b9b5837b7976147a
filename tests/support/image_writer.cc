// Implementation of tests/support/image_writer.h.
#include "tests/support/image_writer.h"

#include <jpeglib.h>
#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "core/error.h"

namespace spire::testing {
namespace {

void png_write_mem(png_structp png, png_bytep data, png_size_t n) {
  auto* out = static_cast<ImageBytes*>(png_get_io_ptr(png));
  out->insert(out->end(), data, data + n);
}
void png_flush_mem(png_structp) {}

struct PngWriteGuard {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~PngWriteGuard() {
    if (png) png_destroy_write_struct(&png, info ? &info : nullptr);
  }
};

bool run_png_write(PngWriteGuard* g, const PngSpec* s, std::vector<png_bytep>* rows,
                   ImageBytes* out) {
  if (setjmp(png_jmpbuf(g->png))) return false;
  png_set_write_fn(g->png, out, png_write_mem, png_flush_mem);
  png_set_IHDR(g->png, g->info, static_cast<png_uint_32>(s->width),
               static_cast<png_uint_32>(s->height), s->bit_depth, static_cast<int>(s->color),
               s->interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  if (s->color == PngColor::kPalette) {
    std::vector<png_color> pal(s->palette.size() / 3);
    for (size_t i = 0; i < pal.size(); ++i)
      pal[i] = png_color{s->palette[3 * i], s->palette[3 * i + 1], s->palette[3 * i + 2]};
    png_set_PLTE(g->png, g->info, pal.data(), static_cast<int>(pal.size()));
  }
  png_write_info(g->png, g->info);
  png_write_image(g->png, rows->data());
  png_write_end(g->png, nullptr);
  return true;
}

struct JpegWriteError {
  jpeg_error_mgr pub;
  jmp_buf jump;
};

[[noreturn]] void jpeg_write_fail(j_common_ptr cinfo) {
  std::longjmp(reinterpret_cast<JpegWriteError*>(cinfo->err)->jump, 1);
}

struct JpegWriteGuard {
  jpeg_compress_struct cinfo;
  JpegWriteError err;
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  bool created = false;
  ~JpegWriteGuard() {
    if (created) jpeg_destroy_compress(&cinfo);
    std::free(buf);
  }
};

bool run_jpeg_write(JpegWriteGuard* g, int width, int height, int components, const uint8_t* samples,
                    int quality) {
  g->cinfo.err = jpeg_std_error(&g->err.pub);
  g->err.pub.error_exit = jpeg_write_fail;
  if (setjmp(g->err.jump)) return false;
  jpeg_create_compress(&g->cinfo);
  g->created = true;
  jpeg_mem_dest(&g->cinfo, &g->buf, &g->size);
  g->cinfo.image_width = static_cast<JDIMENSION>(width);
  g->cinfo.image_height = static_cast<JDIMENSION>(height);
  g->cinfo.input_components = components;
  g->cinfo.in_color_space = components == 1 ? JCS_GRAYSCALE : components == 3 ? JCS_RGB : JCS_CMYK;
  jpeg_set_defaults(&g->cinfo);
  jpeg_set_quality(&g->cinfo, quality, TRUE);
  jpeg_start_compress(&g->cinfo, TRUE);
  const size_t row = static_cast<size_t>(width) * static_cast<size_t>(components);
  while (g->cinfo.next_scanline < g->cinfo.image_height) {
    JSAMPROW r = const_cast<JSAMPROW>(samples + row * g->cinfo.next_scanline);
    jpeg_write_scanlines(&g->cinfo, &r, 1);
  }
  jpeg_finish_compress(&g->cinfo);
  return true;
}

}  // namespace

ImageBytes encode_png(const PngSpec& s) {
  const int channels = s.color == PngColor::kGray || s.color == PngColor::kPalette ? 1
                       : s.color == PngColor::kGrayAlpha                          ? 2
                       : s.color == PngColor::kRGB                                ? 3
                                                                                  : 4;
  const size_t per_row = static_cast<size_t>(s.width) * static_cast<size_t>(channels);
  SPIRE_CHECK(s.samples.size() == per_row * static_cast<size_t>(s.height), "encode_png: ",
              s.samples.size(), " samples for ", s.width, "x", s.height, "x", channels);
  // Pack the samples into PNG rows: big-endian 16-bit, or bits packed from the high bit.
  const size_t row_bytes = (per_row * static_cast<size_t>(s.bit_depth) + 7) / 8;
  std::vector<uint8_t> packed(row_bytes * static_cast<size_t>(s.height), 0);
  for (int y = 0; y < s.height; ++y) {
    uint8_t* r = packed.data() + row_bytes * static_cast<size_t>(y);
    for (size_t i = 0; i < per_row; ++i) {
      const uint16_t v = s.samples[per_row * static_cast<size_t>(y) + i];
      if (s.bit_depth == 16) {
        r[2 * i] = static_cast<uint8_t>(v >> 8);
        r[2 * i + 1] = static_cast<uint8_t>(v);
      } else if (s.bit_depth == 8) {
        r[i] = static_cast<uint8_t>(v);
      } else {
        const size_t bit = i * static_cast<size_t>(s.bit_depth);
        r[bit / 8] |= static_cast<uint8_t>(v << (8 - s.bit_depth - bit % 8));
      }
    }
  }
  std::vector<png_bytep> rows(static_cast<size_t>(s.height));
  for (int y = 0; y < s.height; ++y) rows[static_cast<size_t>(y)] = packed.data() + row_bytes * y;
  PngWriteGuard g;
  g.png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  SPIRE_CHECK(g.png != nullptr, "encode_png: png_create_write_struct failed");
  g.info = png_create_info_struct(g.png);
  SPIRE_CHECK(g.info != nullptr, "encode_png: png_create_info_struct failed");
  ImageBytes out;
  SPIRE_CHECK(run_png_write(&g, &s, &rows, &out), "encode_png: libpng failed");
  return out;
}

ImageBytes encode_jpeg(int width, int height, int components, const std::vector<uint8_t>& samples,
                       int quality) {
  SPIRE_CHECK(samples.size() == static_cast<size_t>(width) * height * components,
              "encode_jpeg: ", samples.size(), " samples for ", width, "x", height, "x",
              components);
  JpegWriteGuard g;
  SPIRE_CHECK(run_jpeg_write(&g, width, height, components, samples.data(), quality),
              "encode_jpeg: libjpeg failed");
  return ImageBytes(g.buf, g.buf + g.size);
}

void write_bytes_file(const std::string& path, const ImageBytes& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  SPIRE_CHECK(f.good(), "write_bytes_file: cannot write ", path);
}

}  // namespace spire::testing
