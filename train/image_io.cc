// Implementation of train/image_io.h: JPEG through libjpeg(-turbo), PNG
// through libpng, both from memory.
//
// Both libraries report errors through a callback that must not return:
// their defaults print and exit (libjpeg) or longjmp to a jmp_buf the caller
// must have set (libpng). Here each decoder's library calls run in one plain
// function (run_jpeg, run_png) that sets a jmp_buf; the error callbacks copy
// the library's message and longjmp back there, and the function returns
// false. No C++ object with a destructor lives in those frames' reach of
// the jump: the library state is owned by an RAII guard in the caller's
// frame, which destroys it (freeing all of the library's memory) on every
// path, and the pixel buffer is a vector owned by the caller. The message
// then becomes a spire::Error naming the file.
#include "train/image_io.h"

#include <jerror.h>
#include <jpeglib.h>
#include <png.h>

#include <atomic>
#include <cerrno>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <vector>

#include "core/logger.h"

namespace spire {
namespace {

// Decoded 8-bit pixels before the conversion to f32 BGR/RGB.
struct Pixels {
  std::vector<uint8_t> data;
  int64_t height = 0, width = 0;
  int channels = 0;  // 1 gray, 2 gray+alpha, 3 RGB, 4 RGBA, or 4 CMYK (cmyk = true)
  bool cmyk = false;
};

// ---- JPEG ----------------------------------------------------------------------------------

struct JpegError {
  jpeg_error_mgr pub;  // first: libjpeg passes &pub as cinfo->err
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void jpeg_fail(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  err->message[0] = '\0';
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Warnings (level -1) that mean image data was lost fail the decode; the
// others are counted and ignored; trace messages (level >= 0) are dropped.
void jpeg_message(j_common_ptr cinfo, int level) {
  if (level >= 0) return;
  switch (cinfo->err->msg_code) {
    case JWRN_JPEG_EOF:      // premature end of file
    case JWRN_HIT_MARKER:    // premature end of a data segment
    case JWRN_HUFF_BAD_CODE: // corrupt entropy-coded data
    case JWRN_MUST_RESYNC:   // lost a restart marker
      jpeg_fail(cinfo);
    default:
      cinfo->err->num_warnings++;
  }
}

// Owns the decompressor; destroying it frees everything libjpeg allocated,
// also after a longjmp out of the middle of decoding.
struct JpegGuard {
  jpeg_decompress_struct cinfo;
  JpegError err;
  bool created = false;
  ~JpegGuard() {
    if (created) jpeg_destroy_decompress(&cinfo);
  }
};

// Returns false (with g->err.message set) when libjpeg reports an error.
// `too_big` is set when the image exceeds max_pixels (then returns true
// without decoding).
bool run_jpeg(JpegGuard* g, const uint8_t* data, size_t size, int64_t max_pixels, Pixels* out,
              bool* too_big) {
  g->cinfo.err = jpeg_std_error(&g->err.pub);
  g->err.pub.error_exit = jpeg_fail;
  g->err.pub.emit_message = jpeg_message;
  if (setjmp(g->err.jump)) return false;
  jpeg_create_decompress(&g->cinfo);
  g->created = true;
  jpeg_mem_src(&g->cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&g->cinfo, TRUE);
  switch (g->cinfo.jpeg_color_space) {
    case JCS_GRAYSCALE: g->cinfo.out_color_space = JCS_GRAYSCALE; break;
    case JCS_CMYK:
    case JCS_YCCK: g->cinfo.out_color_space = JCS_CMYK; break;
    default: g->cinfo.out_color_space = JCS_RGB; break;
  }
  const int64_t h = g->cinfo.image_height, w = g->cinfo.image_width;
  if (h * w > max_pixels) {
    out->height = h;
    out->width = w;
    *too_big = true;
    return true;
  }
  jpeg_start_decompress(&g->cinfo);
  out->height = g->cinfo.output_height;
  out->width = g->cinfo.output_width;
  out->channels = g->cinfo.output_components;
  out->cmyk = g->cinfo.out_color_space == JCS_CMYK;
  const size_t row = static_cast<size_t>(out->width) * static_cast<size_t>(out->channels);
  out->data.resize(row * static_cast<size_t>(out->height));
  while (g->cinfo.output_scanline < g->cinfo.output_height) {
    JSAMPROW rowp = out->data.data() + row * g->cinfo.output_scanline;
    jpeg_read_scanlines(&g->cinfo, &rowp, 1);
  }
  jpeg_finish_decompress(&g->cinfo);
  return true;
}

// ---- PNG -----------------------------------------------------------------------------------

struct PngReader {
  const uint8_t* data;
  size_t size;
  size_t pos = 0;
  char message[256] = {0};
};

[[noreturn]] void png_fail(png_structp png, png_const_charp msg) {
  auto* r = static_cast<PngReader*>(png_get_error_ptr(png));
  std::snprintf(r->message, sizeof(r->message), "%s", msg ? msg : "unknown libpng error");
  png_longjmp(png, 1);
}

void png_warn(png_structp, png_const_charp) {}  // warnings are ignored (cv2 prints them)

void png_read_mem(png_structp png, png_bytep dst, png_size_t n) {
  auto* r = static_cast<PngReader*>(png_get_io_ptr(png));
  if (n > r->size - r->pos) png_error(png, "unexpected end of file (truncated PNG)");
  std::memcpy(dst, r->data + r->pos, n);
  r->pos += n;
}

struct PngGuard {
  png_structp png = nullptr;
  png_infop info = nullptr;
  std::vector<png_bytep> rows;
  ~PngGuard() {
    if (png) png_destroy_read_struct(&png, info ? &info : nullptr, nullptr);
  }
};

bool run_png(PngGuard* g, PngReader* reader, int64_t max_pixels, Pixels* out, bool* too_big) {
  if (setjmp(png_jmpbuf(g->png))) return false;
  png_set_read_fn(g->png, reader, png_read_mem);
  png_read_info(g->png, g->info);
  const int64_t w = png_get_image_width(g->png, g->info), h = png_get_image_height(g->png, g->info);
  if (h * w > max_pixels) {
    out->height = h;
    out->width = w;
    *too_big = true;
    return true;
  }
  const int color = png_get_color_type(g->png, g->info);
  const int depth = png_get_bit_depth(g->png, g->info);
  // cv2.imread(IMREAD_COLOR)'s transformations: high byte of 16-bit
  // samples, palette to RGB, low-depth gray to 8 bits, alpha dropped.
  if (depth == 16) png_set_strip_16(g->png);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(g->png);
  if ((color & PNG_COLOR_MASK_COLOR) == 0 && depth < 8) png_set_expand_gray_1_2_4_to_8(g->png);
  png_set_strip_alpha(g->png);
  png_set_interlace_handling(g->png);
  png_read_update_info(g->png, g->info);
  out->height = h;
  out->width = w;
  out->channels = png_get_channels(g->png, g->info);
  const size_t row = png_get_rowbytes(g->png, g->info);
  if (row != static_cast<size_t>(w) * static_cast<size_t>(out->channels))
    png_error(g->png, "unexpected row size after the 8-bit transformations");
  out->data.resize(row * static_cast<size_t>(h));
  g->rows.resize(static_cast<size_t>(h));
  for (int64_t y = 0; y < h; ++y) g->rows[static_cast<size_t>(y)] = out->data.data() + row * y;
  png_read_image(g->png, g->rows.data());
  png_read_end(g->png, nullptr);  // reads up to IEND: a file cut after the pixels fails here
  return true;
}

// ---- conversion ----------------------------------------------------------------------------

Tensor to_tensor(const Pixels& p, ColorOrder order) {
  Tensor t(DType::F32, Shape{p.height, p.width, 3});
  float* dst = t.data<float>();
  const uint8_t* src = p.data.data();
  const int64_t n = p.height * p.width;
  // Position of R, G, B in the output.
  const int r_at = order == ColorOrder::kBGR ? 2 : 0, b_at = 2 - r_at;
  for (int64_t i = 0; i < n; ++i, dst += 3) {
    int r, g, b;
    const uint8_t* s = src + i * p.channels;
    if (p.cmyk) {  // OpenCV's icvCvt_CMYK2BGR (Adobe's inverted CMYK)
      const int k = s[3];
      r = k - ((255 - s[0]) * k >> 8);
      g = k - ((255 - s[1]) * k >> 8);
      b = k - ((255 - s[2]) * k >> 8);
    } else if (p.channels <= 2) {  // gray (+ alpha, dropped)
      r = g = b = s[0];
    } else {  // RGB (+ alpha, dropped)
      r = s[0];
      g = s[1];
      b = s[2];
    }
    dst[r_at] = static_cast<float>(r);
    dst[1] = static_cast<float>(g);
    dst[b_at] = static_cast<float>(b);
  }
  return t;
}

std::string first_bytes(const uint8_t* data, size_t size) {
  std::string s;
  char buf[4];
  for (size_t i = 0; i < size && i < 8; ++i) {
    std::snprintf(buf, sizeof(buf), "%s%02x", i ? " " : "", data[i]);
    s += buf;
  }
  return s;
}

}  // namespace

ImageFormat detect_image_format(const uint8_t* data, size_t size) {
  static const uint8_t kPng[8] = {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a};
  if (size >= 3 && data[0] == 0xff && data[1] == 0xd8 && data[2] == 0xff) return ImageFormat::kJpeg;
  if (size >= 8 && std::memcmp(data, kPng, 8) == 0) return ImageFormat::kPng;
  return ImageFormat::kUnknown;
}

Tensor decode_image(const uint8_t* data, size_t size, const std::string& name,
                    const ImageDecodeOptions& options) {
  SPIRE_CHECK(size > 0, name, ": empty file, expected a JPEG or PNG image");
  const ImageFormat format = detect_image_format(data, size);
  SPIRE_CHECK(format != ImageFormat::kUnknown, name,
              ": not a JPEG or PNG image (the file starts with bytes ", first_bytes(data, size),
              "; JPEG starts with ff d8 ff, PNG with 89 50 4e 47 0d 0a 1a 0a)");
  Pixels px;
  bool too_big = false;
  const char* what = format == ImageFormat::kJpeg ? "JPEG" : "PNG";
  if (format == ImageFormat::kJpeg) {
    JpegGuard g;
    if (!run_jpeg(&g, data, size, options.max_pixels, &px, &too_big))
      throw_error(name, ": corrupt or truncated JPEG image (", size, " bytes): ", g.err.message);
  } else {
    PngGuard g;
    PngReader reader{data, size};
    g.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &reader, png_fail, png_warn);
    SPIRE_CHECK(g.png != nullptr, name, ": cannot create a libpng reader (out of memory?)");
    g.info = png_create_info_struct(g.png);
    SPIRE_CHECK(g.info != nullptr, name, ": cannot create a libpng info struct (out of memory?)");
    if (!run_png(&g, &reader, options.max_pixels, &px, &too_big))
      throw_error(name, ": corrupt or truncated PNG image (", size, " bytes): ", reader.message);
  }
  SPIRE_CHECK(!too_big, name, ": ", what, " image of ", px.width, "x", px.height, " = ",
              px.width * px.height, " pixels is larger than the limit of ", options.max_pixels,
              " pixels (ImageDecodeOptions::max_pixels)");
  SPIRE_CHECK(px.height > 0 && px.width > 0 && px.channels >= 1 && px.channels <= 4 &&
                  (!px.cmyk || px.channels == 4),
              name, ": unsupported ", what, " layout: ", px.width, "x", px.height, " with ",
              px.channels, " channels");
  return to_tensor(px, options.order);
}

Tensor read_image(const std::string& path, const ImageDecodeOptions& options) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  SPIRE_CHECK(static_cast<bool>(f), "cannot open image ", path, ": ", std::strerror(errno));
  const std::streamoff n = f.tellg();
  SPIRE_CHECK(n >= 0, "cannot determine the size of image ", path);
  std::vector<uint8_t> bytes(static_cast<size_t>(n));
  f.seekg(0);
  if (n > 0) f.read(reinterpret_cast<char*>(bytes.data()), n);
  SPIRE_CHECK(f.gcount() == n, "error reading image ", path, ": read ", f.gcount(), " of ", n,
              " bytes");
  return decode_image(bytes.data(), bytes.size(), path, options);
}

Tensor string_to_tensor(const std::string& s) {
  std::vector<int32_t> v(s.size());
  for (size_t i = 0; i < s.size(); ++i) v[i] = static_cast<unsigned char>(s[i]);
  return Tensor::from_vector<int32_t>(Shape{static_cast<int64_t>(s.size())}, v);
}

std::string tensor_to_string(const Tensor& t) {
  SPIRE_CHECK(t.defined() && t.dtype() == DType::I32 && t.rank() == 1,
              "tensor_to_string: expected an i32 [len] tensor of bytes (string_to_tensor), got ",
              t.defined() ? t.type_string() : std::string("an undefined tensor"));
  std::vector<int32_t> v = t.to_vector<int32_t>();
  std::string s(v.size(), '\0');
  for (size_t i = 0; i < v.size(); ++i) {
    SPIRE_CHECK(v[i] >= 0 && v[i] <= 255, "tensor_to_string: value ", v[i], " at position ", i,
                " is not a byte (0..255)");
    s[i] = static_cast<char>(v[i]);
  }
  return s;
}

// ---- ImageFileDecoder ----------------------------------------------------------------------

struct ImageFileDecoder::State {
  std::atomic<int64_t> skipped{0};
};

ImageFileDecoder::ImageFileDecoder(int index, bool skip_bad_images, ImageDecodeOptions options)
    : index_(index), skip_bad_(skip_bad_images), options_(options),
      state_(std::make_shared<State>()) {}

std::optional<Datapoint> ImageFileDecoder::operator()(Datapoint dp) const {
  const auto n = static_cast<int64_t>(dp.size());
  const int64_t idx = index_ < 0 ? index_ + n : index_;
  SPIRE_CHECK(idx >= 0 && idx < n, "ImageFileDecoder: index ", index_,
              " is out of range for a datapoint with ", n, " components");
  const std::string path = tensor_to_string(dp[static_cast<size_t>(idx)]);
  try {
    dp[static_cast<size_t>(idx)] = read_image(path, options_);
  } catch (const Error& e) {
    if (!skip_bad_) throw;
    const int64_t count = ++state_->skipped;
    logger::warn("skipping a bad image (", count, " so far): ", e.what());
    return std::nullopt;
  }
  return dp;
}

int64_t ImageFileDecoder::skipped() const { return state_->skipped.load(); }

}  // namespace spire
