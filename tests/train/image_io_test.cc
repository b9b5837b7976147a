// Tests of the image decoders (train/image_io.h) on PNG and JPEG files the
// tests write with libpng and libjpeg (tests/support/image_writer.h): exact
// pixels for PNG in every color type, bit depth and interlacing, JPEG within
// its loss, BGR and RGB order, CMYK JPEG, detection by content (a PNG named
// .JPEG), errors naming the file for truncated, corrupt and foreign files,
// the pixel limit, path components and ImageFileDecoder with skip_bad_images
// under MultiThreadMapData.
#include "train/image_io.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "tests/support/image_writer.h"
#include "tests/support/op_test_util.h"
#include "tests/support/temp_dir.h"

namespace spire::testing {
namespace {

// A color test image: every pixel and channel different, no zeros.
uint8_t px_r(int x, int y) { return static_cast<uint8_t>(30 + 17 * x + 5 * y); }
uint8_t px_g(int x, int y) { return static_cast<uint8_t>(250 - 9 * y - x); }
uint8_t px_b(int x, int y) { return static_cast<uint8_t>(3 + 11 * x * y % 200); }

PngSpec rgb_spec(int w, int h, bool alpha = false) {
  PngSpec s;
  s.width = w;
  s.height = h;
  s.color = alpha ? PngColor::kRGBA : PngColor::kRGB;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      s.samples.insert(s.samples.end(), {px_r(x, y), px_g(x, y), px_b(x, y)});
      if (alpha) s.samples.push_back(static_cast<uint16_t>((x * 40 + y) % 256));
    }
  return s;
}

float at(const std::vector<float>& v, int w, int x, int y, int c) {
  return v[static_cast<size_t>((y * w + x) * 3 + c)];
}

// Checks a decoded color image against px_r/g/b exactly, in BGR or RGB order.
void expect_color_image(const Tensor& t, int w, int h, bool bgr = true) {
  ASSERT_EQ(t.type_string(), str_cat("f32[", h, ", ", w, ", 3]"));
  std::vector<float> v = t.to_vector<float>();
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      ASSERT_EQ(at(v, w, x, y, bgr ? 2 : 0), px_r(x, y)) << x << "," << y;
      ASSERT_EQ(at(v, w, x, y, 1), px_g(x, y)) << x << "," << y;
      ASSERT_EQ(at(v, w, x, y, bgr ? 0 : 2), px_b(x, y)) << x << "," << y;
    }
}

Tensor decode(const ImageBytes& b, const std::string& name = "mem.img",
              const ImageDecodeOptions& o = {}) {
  return decode_image(b.data(), b.size(), name, o);
}

TEST(ImageIo, DetectsFormatByContent) {
  ImageBytes png = encode_png(rgb_spec(3, 2));
  ImageBytes jpg = encode_jpeg(2, 2, 1, {10, 20, 30, 40});
  EXPECT_EQ(detect_image_format(png.data(), png.size()), ImageFormat::kPng);
  EXPECT_EQ(detect_image_format(jpg.data(), jpg.size()), ImageFormat::kJpeg);
  EXPECT_EQ(detect_image_format(png.data(), 7), ImageFormat::kUnknown);
  EXPECT_EQ(detect_image_format(jpg.data(), 2), ImageFormat::kUnknown);
  const uint8_t gif[] = {'G', 'I', 'F', '8', '9', 'a'};
  EXPECT_EQ(detect_image_format(gif, sizeof(gif)), ImageFormat::kUnknown);

  // A PNG named .JPEG (as ILSVRC's n02105855_2933.JPEG) and a JPEG named .png.
  TempDir dir;
  write_bytes_file(dir.file("n02105855_2933.JPEG"), png);
  expect_color_image(read_image(dir.file("n02105855_2933.JPEG")), 3, 2);
  write_bytes_file(dir.file("really_a.png"), jpg);
  EXPECT_EQ(read_image(dir.file("really_a.png")).type_string(), "f32[2, 2, 3]");
}

TEST(ImageIo, PngColorTypesAreExact) {
  // RGB 8-bit, BGR by default and RGB on request; Adam7-interlaced the same.
  expect_color_image(decode(encode_png(rgb_spec(7, 5))), 7, 5);
  ImageDecodeOptions rgb;
  rgb.order = ColorOrder::kRGB;
  expect_color_image(decode(encode_png(rgb_spec(7, 5)), "x", rgb), 7, 5, /*bgr=*/false);
  PngSpec inter = rgb_spec(9, 10);
  inter.interlaced = true;
  expect_color_image(decode(encode_png(inter)), 9, 10);
  // RGBA: the alpha channel is dropped, not composited.
  expect_color_image(decode(encode_png(rgb_spec(6, 4, /*alpha=*/true))), 6, 4);

  // Gray (8-bit, 16-bit: the high byte, 2-bit: scaled to 8 bits) and gray+alpha: 3 equal channels.
  auto expect_gray = [](const Tensor& t, const std::vector<float>& expected) {
    std::vector<float> v = t.to_vector<float>();
    ASSERT_EQ(v.size(), expected.size() * 3);
    for (size_t i = 0; i < expected.size(); ++i)
      for (int c = 0; c < 3; ++c) EXPECT_EQ(v[3 * i + static_cast<size_t>(c)], expected[i]) << i;
  };
  PngSpec g;
  g.width = 3;
  g.height = 2;
  g.color = PngColor::kGray;
  g.samples = {7, 100, 255, 1, 128, 254};
  Tensor gray = decode(encode_png(g));
  EXPECT_EQ(gray.type_string(), "f32[2, 3, 3]");
  expect_gray(gray, {7, 100, 255, 1, 128, 254});
  g.bit_depth = 16;
  g.samples = {0x0712, 0x64ff, 0xff00, 0x0180, 0x8001, 0xfeff};
  expect_gray(decode(encode_png(g)), {7, 100, 255, 1, 128, 254});
  g.bit_depth = 2;
  g.samples = {0, 1, 2, 3, 2, 1};
  expect_gray(decode(encode_png(g)), {0, 85, 170, 255, 170, 85});
  PngSpec ga;
  ga.width = 2;
  ga.height = 2;
  ga.color = PngColor::kGrayAlpha;
  ga.samples = {10, 0, 20, 255, 30, 128, 40, 7};
  expect_gray(decode(encode_png(ga)), {10, 20, 30, 40});

  // 16-bit RGB keeps the high byte of each sample.
  PngSpec rgb16 = rgb_spec(4, 3);
  rgb16.bit_depth = 16;
  for (uint16_t& v : rgb16.samples) v = static_cast<uint16_t>(v << 8 | 0x9c);
  expect_color_image(decode(encode_png(rgb16)), 4, 3);

  // Palette: indices into RGB triples.
  PngSpec pal;
  pal.width = 2;
  pal.height = 2;
  pal.color = PngColor::kPalette;
  pal.palette = {200, 10, 20, 5, 150, 250, 1, 2, 3};
  pal.samples = {0, 1, 2, 1};
  std::vector<float> v = decode(encode_png(pal)).to_vector<float>();
  EXPECT_EQ(v, (std::vector<float>{20, 10, 200, 250, 150, 5, 3, 2, 1, 250, 150, 5}));
}

TEST(ImageIo, JpegWithinLoss) {
  // A smooth color image (JPEG's loss is small there), quality 95.
  const int w = 24, h = 16;
  std::vector<uint8_t> rgb;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      rgb.insert(rgb.end(), {static_cast<uint8_t>(20 + 8 * x), static_cast<uint8_t>(230 - 6 * y),
                             static_cast<uint8_t>(60 + 3 * x + 4 * y)});
  for (bool bgr : {true, false}) {
    ImageDecodeOptions o;
    o.order = bgr ? ColorOrder::kBGR : ColorOrder::kRGB;
    std::vector<float> v = decode(encode_jpeg(w, h, 3, rgb, 95), "x.jpg", o).to_vector<float>();
    ASSERT_EQ(v.size(), rgb.size());
    double sum = 0, worst = 0;
    for (int i = 0; i < w * h; ++i)
      for (int c = 0; c < 3; ++c) {
        const int src_c = bgr ? 2 - c : c;
        const double d = std::fabs(v[static_cast<size_t>(3 * i + c)] - rgb[static_cast<size_t>(3 * i + src_c)]);
        sum += d;
        worst = std::max(worst, d);
      }
    EXPECT_LT(sum / static_cast<double>(rgb.size()), 2.0) << bgr;
    EXPECT_LE(worst, 12.0) << bgr;
  }
  // Grayscale JPEG: 3 equal channels close to the written values.
  std::vector<uint8_t> gray;
  for (int i = 0; i < 64; ++i) gray.push_back(static_cast<uint8_t>(40 + 2 * i));
  std::vector<float> g = decode(encode_jpeg(8, 8, 1, gray, 100)).to_vector<float>();
  ASSERT_EQ(g.size(), 192u);
  for (size_t i = 0; i < 64; ++i) {
    EXPECT_NEAR(g[3 * i], gray[i], 2.0) << i;
    EXPECT_EQ(g[3 * i], g[3 * i + 1]);
    EXPECT_EQ(g[3 * i], g[3 * i + 2]);
  }
  // CMYK (libjpeg writes Adobe's inverted CMYK): OpenCV's conversion
  // c' = k - (255 - c) * k / 256 per channel, as cv2.imread gives.
  std::vector<uint8_t> cmyk;
  const uint8_t ink[4] = {40, 180, 220, 200};  // one flat color: JPEG keeps it nearly exact
  for (int i = 0; i < 64; ++i) cmyk.insert(cmyk.end(), ink, ink + 4);
  std::vector<float> c = decode(encode_jpeg(8, 8, 4, cmyk, 100)).to_vector<float>();
  const int k = ink[3];
  const float r = static_cast<float>(k - ((255 - ink[0]) * k >> 8));
  const float gg = static_cast<float>(k - ((255 - ink[1]) * k >> 8));
  const float b = static_cast<float>(k - ((255 - ink[2]) * k >> 8));
  for (size_t i = 0; i < 64; ++i) {
    EXPECT_NEAR(c[3 * i + 0], b, 2.0) << i;
    EXPECT_NEAR(c[3 * i + 1], gg, 2.0) << i;
    EXPECT_NEAR(c[3 * i + 2], r, 2.0) << i;
  }
}

TEST(ImageIo, BadFilesNameTheFile) {
  TempDir dir;
  // A noisy image, so that the JPEG has plenty of entropy-coded data to cut.
  std::vector<uint8_t> noise;
  for (int i = 0; i < 64 * 64 * 3; ++i) noise.push_back(static_cast<uint8_t>((i * 7919) % 251));
  const ImageBytes jpg = encode_jpeg(64, 64, 3, noise, 90);
  const ImageBytes png = encode_png(rgb_spec(40, 30));

  auto write = [&](const std::string& name, ImageBytes b) {
    write_bytes_file(dir.file(name), b);
    return dir.file(name);
  };
  ImageBytes cut = jpg;
  cut.resize(cut.size() / 2);
  const std::string p1 = write("cut.jpg", cut);
  expect_error([&] { read_image(p1); }, {p1, "corrupt or truncated JPEG", "Premature end of JPEG file"});
  cut.resize(40);  // inside the headers
  const std::string p2 = write("header.jpg", cut);
  expect_error([&] { read_image(p2); }, {p2, "JPEG"});
  // A marker in the middle of the entropy-coded data (corrupt, not truncated).
  ImageBytes bad = jpg;
  for (size_t i = bad.size() / 2; i < bad.size() / 2 + 16; i += 2) {
    bad[i] = 0xff;
    bad[i + 1] = 0xc4;
  }
  const std::string p3 = write("corrupt.jpg", bad);
  expect_error([&] { read_image(p3); }, {p3, "corrupt or truncated JPEG"});

  ImageBytes pcut = png;
  pcut.resize(pcut.size() / 2);
  const std::string p4 = write("cut.png", pcut);
  expect_error([&] { read_image(p4); }, {p4, "corrupt or truncated PNG", "unexpected end of file"});
  pcut = png;
  pcut.resize(pcut.size() - 12);  // all the pixels, no IEND
  const std::string p5 = write("no_iend.png", pcut);
  expect_error([&] { read_image(p5); }, {p5, "truncated PNG"});
  ImageBytes crc = png;
  crc[crc.size() - 13] ^= 0x55;  // the last byte of the last IDAT chunk's CRC
  const std::string p6 = write("crc.png", crc);
  expect_error([&] { read_image(p6); }, {p6, "corrupt or truncated PNG", "CRC"});

  const std::string p7 = write("garbage.JPEG", ImageBytes{'h', 'e', 'l', 'l', 'o', 1, 2, 3, 4, 5});
  expect_error([&] { read_image(p7); },
               {p7, "not a JPEG or PNG image", "68 65 6c 6c 6f 01 02 03"});
  const std::string p8 = write("empty.png", ImageBytes{});
  expect_error([&] { read_image(p8); }, {p8, "empty file"});
  expect_error([&] { read_image(dir.file("missing.jpg")); }, {"cannot open image", "missing.jpg"});

  // Too many pixels: rejected from the header, before decoding.
  ImageDecodeOptions small;
  small.max_pixels = 40 * 30 - 1;
  expect_error([&] { decode(png, "big.png", small); },
               {"big.png", "PNG image of 40x30 = 1200 pixels", "limit of 1199"});
  expect_error([&] { decode(jpg, "big.jpg", small); }, {"big.jpg", "JPEG image of 64x64"});
  small.max_pixels = 40 * 30;
  EXPECT_EQ(decode(png, "ok.png", small).type_string(), "f32[30, 40, 3]");
}

TEST(ImageIo, StringTensors) {
  const std::string s = "dir/n01440764/\xc3\xa9t\xe9.JPEG";
  Tensor t = string_to_tensor(s);
  EXPECT_EQ(t.type_string(), str_cat("i32[", s.size(), "]"));
  EXPECT_EQ(tensor_to_string(t), s);
  EXPECT_EQ(tensor_to_string(string_to_tensor("")), "");
  expect_error([] { tensor_to_string(Tensor::from_vector<int64_t>({1}, {65})); },
               {"tensor_to_string", "i32 [len]", "i64[1]"});
  expect_error([] { tensor_to_string(Tensor::from_vector<int32_t>({2}, {65, 300})); },
               {"tensor_to_string", "value 300 at position 1"});
}

TEST(ImageIo, DecoderSkipsAndCountsBadImages) {
  TempDir dir;
  std::vector<Datapoint> files;
  for (int i = 0; i < 12; ++i) {
    const std::string path = dir.file(str_cat("img", i, i % 4 == 3 ? ".png" : ".jpg"));
    if (i % 4 == 3) {
      write_bytes_file(path, ImageBytes{'b', 'a', 'd', static_cast<uint8_t>(i)});
    } else {
      PngSpec s = rgb_spec(3 + i, 2);
      write_bytes_file(path, encode_png(s));
    }
    files.push_back({string_to_tensor(path), Tensor::scalar<int64_t>(i)});
  }
  // Strict: the error names the file.
  ImageFileDecoder strict;
  EXPECT_TRUE(strict({string_to_tensor(dir.file("img0.jpg"))}).has_value());
  expect_error([&] { strict(files[3]); }, {dir.file("img3.png"), "not a JPEG or PNG"});
  EXPECT_EQ(strict.skipped(), 0);

  // Skipping, in 3 threads: the 3 bad ones are dropped and counted.
  ImageFileDecoder skip(0, /*skip_bad_images=*/true);
  auto df = std::make_shared<MultiThreadMapData>(std::make_shared<DataFromList>(files, false), 3,
                                                 skip);
  df->reset_state();
  std::vector<int64_t> labels;
  for (Datapoint& dp : df->epoch()) {
    const int64_t i = dp[1].item<int64_t>();
    labels.push_back(i);
    expect_color_image(dp[0], 3 + static_cast<int>(i), 2);
  }
  std::sort(labels.begin(), labels.end());
  EXPECT_EQ(labels, (std::vector<int64_t>{0, 1, 2, 4, 5, 6, 8, 9, 10}));
  // The copy inside the DataFlow shares the count (its workers may already
  // have started the next epoch, so at least 3).
  EXPECT_GE(skip.skipped(), 3);
  df->stop();
  // One thread, no read-ahead: exactly 3 per pass.
  ImageFileDecoder skip1(0, /*skip_bad_images=*/true);
  auto serial = std::make_shared<MapData>(std::make_shared<DataFromList>(files, false), skip1);
  serial->reset_state();
  for (int epoch = 1; epoch <= 2; ++epoch) {
    int64_t n = 0;
    for (Datapoint& dp : serial->epoch()) n += dp[1].item<int64_t>() >= 0;
    EXPECT_EQ(n, 9);
    EXPECT_EQ(skip1.skipped(), 3 * epoch);
  }

  // Another component index; a bad index.
  ImageFileDecoder second(1);
  std::optional<Datapoint> dp = second({Tensor::scalar<int64_t>(4), files[1][0]});
  ASSERT_TRUE(dp.has_value());
  expect_color_image((*dp)[1], 4, 2);
  EXPECT_EQ((*dp)[0].item<int64_t>(), 4);
  expect_error([&] { ImageFileDecoder(2)(files[0]); }, {"ImageFileDecoder", "index 2"});
}

}  // namespace
}  // namespace spire::testing
