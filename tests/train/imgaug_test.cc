// Tests of the image augmentors (train/imgaug.h) on tiny images against
// hand-computed results: paste and crop offsets, flips, resize sizes and
// values (bilinear and bicubic), GoogleNet's crop and its fallback, the
// photometric formulas with given parameters, the ranges and frequencies of
// the draws, determinism for a seed, RandomOrderAug's orders, and the
// DataFlow glue (AugmentImageComponent, augment_component_func through
// MultiThreadMapData + BatchData after ILSVRC12Files).
#include "train/imgaug.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "tests/support/image_writer.h"
#include "tests/support/op_test_util.h"
#include "tests/support/temp_dir.h"
#include "train/image_io.h"
#include "train/imagenet_folder.h"

namespace spire::testing {
namespace {

// [h, w, c] image with value 10 * y + x + 100 * ch + 1 (never zero).
Tensor ramp(int64_t h, int64_t w, int64_t c = 1) {
  std::vector<float> v;
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int64_t ch = 0; ch < c; ++ch) v.push_back(static_cast<float>(10 * y + x + 100 * ch + 1));
  return Tensor::from_vector<float>({h, w, c}, v);
}

Tensor img3(const std::vector<float>& bgr, int64_t h, int64_t w) {
  return Tensor::from_vector<float>({h, w, 3}, bgr);
}

void expect_values(const Tensor& t, const std::vector<float>& expected, float tol = 1e-4f) {
  std::vector<float> v = t.to_vector<float>();
  ASSERT_EQ(v.size(), expected.size()) << t.type_string();
  for (size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(v[i], expected[i], tol) << "at " << i;
}

TEST(ImgAug, CenterPasteAndCrops) {
  // 2x3 onto 4x6 filled with 9: y0 = int(1.0) = 1, x0 = int(1.5) = 1.
  Tensor small = ramp(2, 3);
  Tensor pasted = CenterPaste(4, 6, 9.0f).augment(small);
  EXPECT_EQ(pasted.type_string(), "f32[4, 6, 1]");
  expect_values(pasted, {9, 9, 9, 9, 9, 9,  //
                         9, 1, 2, 3, 9, 9,  //
                         9, 11, 12, 13, 9, 9,  //
                         9, 9, 9, 9, 9, 9});
  expect_error([&] { CenterPaste(2, 2).augment(small); }, {"CenterPaste", "does not fit", "2x2"});

  // CenterCrop 2x3 of 5x6: y0 = int(1.5) = 1, x0 = int(1.5) = 1.
  Tensor img = ramp(5, 6, 2);
  expect_values(CenterCrop(2, 3).augment(img),
                {12, 112, 13, 113, 14, 114, 22, 122, 23, 123, 24, 124});
  expect_error([&] { CenterCrop(6, 1).augment(img); }, {"CenterCrop", "smaller than the crop 6x1"});

  // RandomCrop with given offsets, and its draws: every offset in [0, 3] x [0, 3] appears.
  RandomCrop rc(2, 3, /*seed=*/4);
  expect_values(rc.apply(img, {{2, 1}}), {22, 122, 23, 123, 24, 124, 32, 132, 33, 133, 34, 134});
  std::set<std::pair<int, int>> offsets;
  for (int i = 0; i < 400; ++i) {
    AugParams p = rc.get_params(img.shape());
    ASSERT_EQ(p.v.size(), 2u);
    offsets.emplace(static_cast<int>(p.v[0]), static_cast<int>(p.v[1]));
  }
  EXPECT_EQ(offsets.size(), 16u);
  EXPECT_EQ(offsets.begin()->first, 0);
  EXPECT_EQ(offsets.rbegin()->first, 3);
  // augment() is a crop at some drawn offset.
  Tensor out = rc.augment(img);
  std::vector<float> o = out.to_vector<float>();
  const int y0 = static_cast<int>(o[0] - 1) / 10, x0 = static_cast<int>(o[0] - 1) % 10;
  expect_values(out, rc.apply(img, {{static_cast<double>(y0), static_cast<double>(x0)}}).to_vector<float>());
  expect_error([&] { RandomCrop(6, 6).augment(img); }, {"RandomCrop", "smaller than the crop 6x6"});
}

TEST(ImgAug, FlipDirectionsAndProbability) {
  Tensor img = ramp(2, 3, 2);
  Flip h(true, false);
  expect_values(h.apply(img, {{1}}), {3, 103, 2, 102, 1, 101, 13, 113, 12, 112, 11, 111});
  expect_values(h.apply(img, {{0}}), img.to_vector<float>());
  Flip v(false, true);
  expect_values(v.apply(img, {{1}}), {11, 111, 12, 112, 13, 113, 1, 101, 2, 102, 3, 103});
  expect_error([] { Flip(true, true); }, {"Flip", "exactly one"});
  expect_error([] { Flip(false, false); }, {"Flip", "exactly one"});
  int flips = 0;
  for (int i = 0; i < 2000; ++i) flips += h.get_params(img.shape()).v[0] == 1.0;
  EXPECT_GT(flips, 880);
  EXPECT_LT(flips, 1120);
  Flip never(true, false, 0.0), always(true, false, 1.0);
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(never.get_params(img.shape()).v[0], 0.0);
    EXPECT_EQ(always.get_params(img.shape()).v[0], 1.0);
  }
}

TEST(ImgAug, ResizeValuesAndSizes) {
  // Bilinear 2x2 -> 4x4 (cv2: pixel centers, border replicated).
  Tensor two = Tensor::from_vector<float>({2, 2, 1}, {10, 20, 30, 40});
  expect_values(resize_image(two, 4, 4), {10, 12.5, 17.5, 20,  //
                                          15, 17.5, 22.5, 25,  //
                                          25, 27.5, 32.5, 35,  //
                                          30, 32.5, 37.5, 40});
  // Bilinear halving averages 2x2 blocks; a 2-D image keeps its rank.
  Tensor four = Tensor::from_vector<float>({4, 4}, {1, 2, 3, 4, 11, 12, 13, 14, 21, 22, 23, 24, 31, 32, 33, 34});
  Tensor half = resize_image(four, 2, 2);
  EXPECT_EQ(half.type_string(), "f32[2, 2]");
  expect_values(half, {6.5, 8.5, 26.5, 28.5});
  // Same size: unchanged for both kernels.
  Tensor img = ramp(3, 5, 3);
  expect_values(resize_image(img, 3, 5, Interp::kCubic), img.to_vector<float>(), 0);
  expect_values(resize_image(img, 3, 5, Interp::kLinear), img.to_vector<float>(), 0);
  // Bicubic 1x4 -> 1x8, a = -0.75. Output 3: source x = 1.25, weights
  // (-0.10546875, 0.87890625, 0.26171875, -0.03515625) on columns 0..3;
  // output 0: source x = -0.25, columns (0, 0, 0, 1) with weights
  // (-0.03515625, 0.26171875, 0.87890625, -0.10546875): 5.78125, below the
  // input's minimum (no clipping).
  Tensor row = Tensor::from_vector<float>({1, 4, 1}, {10, 50, 20, 90});
  std::vector<float> up = resize_image(row, 1, 8, Interp::kCubic).to_vector<float>();
  EXPECT_NEAR(up[3], 44.9609375f, 1e-4);
  EXPECT_NEAR(up[0], 5.78125f, 1e-4);
  expect_error([&] { resize_image(row, 0, 3); }, {"resize_image", "0x3"});
  expect_error([&] { resize_image(Tensor::from_vector<int64_t>({1, 1}, {1}), 2, 2); },
               {"resize_image", "f32", "i64[1, 1]"});

  // ResizeShortestEdge: the short side becomes `size`, the long int(scale * L + 0.5).
  ResizeShortestEdge r6(6), r4(4);
  EXPECT_EQ(r6.output_size(3, 5), (std::array<int64_t, 2>{6, 10}));
  EXPECT_EQ(r4.output_size(7, 10), (std::array<int64_t, 2>{4, 6}));   // 5.714 + 0.5
  EXPECT_EQ(r4.output_size(10, 7), (std::array<int64_t, 2>{6, 4}));
  EXPECT_EQ(r4.output_size(9, 9), (std::array<int64_t, 2>{4, 4}));
  EXPECT_EQ(ResizeShortestEdge(256).output_size(300, 400), (std::array<int64_t, 2>{256, 341}));
  EXPECT_EQ(r4.augment(ramp(7, 10, 3)).type_string(), "f32[4, 6, 3]");
  EXPECT_EQ(Resize(3, 2).augment(ramp(7, 10, 3)).type_string(), "f32[3, 2, 3]");
}

TEST(ImgAug, GoogleNetCropAndFallback) {
  // 8x12, value 10 * y + x + 1.
  Tensor img = ramp(8, 12);
  // Crop rows 1..4, columns 2..5, resize 4x4 -> 2x2 (bilinear halving averages 2x2 blocks).
  GoogleNetRandomCropAndResize g(0.08, 1.0, 0.75, 1.333, /*target=*/2);
  expect_values(g.apply(img, {{1, 1, 2, 4, 4}}), {18.5, 20.5, 38.5, 40.5});
  // An aspect ratio of exactly 2 never fits 8x12 (14x7 or 7x14 for the whole area):
  // every try fails, so the fallback: ResizeShortestEdge(4) -> 4x6, CenterCrop(4) at x0 = 1.
  GoogleNetRandomCropAndResize never_fits(1.0, 1.0, 2.0, 2.0, /*target=*/4, Interp::kLinear, 3);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(never_fits.get_params(img.shape()).v, std::vector<double>{0.0});
  expect_values(never_fits.augment(img), {8.5, 10.5, 12.5, 14.5, 28.5, 30.5, 32.5, 34.5,
                                          48.5, 50.5, 52.5, 54.5, 68.5, 70.5, 72.5, 74.5});
  // Area 1 and aspect 1 on 12x12: hh = ww = 12, the whole image at (0, 0).
  GoogleNetRandomCropAndResize whole(1.0, 1.0, 1.0, 1.0, 12);
  EXPECT_EQ(whole.get_params(Shape{12, 12, 3}).v, (std::vector<double>{1, 0, 0, 12, 12}));
  // Default ranges on 20x30: every drawn crop fits, with area and aspect in range (up to rounding).
  GoogleNetRandomCropAndResize def(0.08, 1.0, 0.75, 1.333, 7, Interp::kCubic, 9);
  int crops = 0;
  for (int i = 0; i < 300; ++i) {
    AugParams p = def.get_params(Shape{20, 30, 3});
    if (p.v[0] == 0.0) continue;
    ++crops;
    const double y1 = p.v[1], x1 = p.v[2], hh = p.v[3], ww = p.v[4];
    EXPECT_TRUE(y1 >= 0 && x1 >= 0 && y1 + hh <= 20 && x1 + ww <= 30) << y1 << " " << x1 << " " << hh << " " << ww;
    EXPECT_GE(hh * ww, 0.08 * 600 * 0.7);
    EXPECT_LE(std::max(hh / ww, ww / hh), 1.333 * 1.5);
  }
  EXPECT_GT(crops, 250);
  EXPECT_EQ(def.augment(ramp(20, 30, 3)).type_string(), "f32[7, 7, 3]");
}

// The draws of GoogleNetRandomCropAndResize and RandomCrop replayed from a
// generator of the same seed, step by step as tensorpack's get_transform
// (models-facts: uniform area and aspect, rounding, the swap coin, x before
// y; fallback after 10 tries; RandomCrop: y before x).
struct ReplayGoogleNet : GoogleNetRandomCropAndResize {
  using GoogleNetRandomCropAndResize::GoogleNetRandomCropAndResize;
  using GoogleNetRandomCropAndResize::draw;
};
struct ReplayRandomCrop : RandomCrop {
  using RandomCrop::RandomCrop;
  using RandomCrop::draw;
};

TEST(ImgAug, DrawsFollowTensorpacksSteps) {
  for (const Shape& shape : {Shape{20, 30, 3}, Shape{9, 40, 3}, Shape{40, 7, 3}}) {
    ReplayGoogleNet g(0.08, 1.0, 0.75, 1.333, 8);
    ImgAugRng rng(42), replay(42);
    int fallbacks = 0;
    for (int i = 0; i < 200; ++i) {
      std::vector<double> expected = {0.0};
      for (int attempt = 0; attempt < 10; ++attempt) {
        const double area = replay.uniform(0.08, 1.0) * static_cast<double>(shape.dim(0) * shape.dim(1));
        const double r = replay.uniform(0.75, 1.333);
        int64_t ww = static_cast<int64_t>(std::sqrt(area * r) + 0.5);
        int64_t hh = static_cast<int64_t>(std::sqrt(area / r) + 0.5);
        if (replay.uniform() < 0.5) std::swap(ww, hh);
        if (hh <= shape.dim(0) && ww <= shape.dim(1)) {
          const int64_t x1 = replay.randint(0, shape.dim(1) - ww + 1);
          const int64_t y1 = replay.randint(0, shape.dim(0) - hh + 1);
          expected = {1.0, static_cast<double>(y1), static_cast<double>(x1), static_cast<double>(hh),
                      static_cast<double>(ww)};
          break;
        }
      }
      fallbacks += expected.size() == 1;
      ASSERT_EQ(g.draw(shape, rng).v, expected) << shape.to_string() << " draw " << i;
    }
    if (shape.dim(0) == 20) EXPECT_EQ(fallbacks, 0);
  }
  // A narrow image: some draws fall back (every try too tall or too wide).
  ReplayGoogleNet g(0.9, 1.0, 0.75, 1.333, 8);
  ImgAugRng rng(1);
  EXPECT_EQ(g.draw(Shape{3, 60, 3}, rng).v, std::vector<double>{0.0});

  ReplayRandomCrop rc(3, 4);
  ImgAugRng a(5), b(5);
  for (int i = 0; i < 50; ++i) {
    const double y0 = static_cast<double>(b.randint(0, 8)), x0 = static_cast<double>(b.randint(0, 7));
    ASSERT_EQ(rc.draw(Shape{10, 10, 3}, a).v, (std::vector<double>{y0, x0}));
  }
}

TEST(ImgAug, PhotometricFormulas) {
  // BGR pixels (10, 20, 30) and (50, 60, 70).
  Tensor img = img3({10, 20, 30, 50, 60, 70}, 1, 2);
  // BrightnessScale: img * v, clipped.
  Tensor bright = img3({10, 100, 200}, 1, 1);
  expect_values(BrightnessScale(0.6, 1.4).apply(bright, {{1.5}}), {15, 150, 255});
  expect_values(BrightnessScale(0.6, 1.4, false).apply(bright, {{1.5}}), {15, 150, 300});

  // Contrast with BGR gray: gray = 21.85 and 61.85, mean 41.85; r = 2: 2x - 41.85, clipped.
  Contrast bgr(0.6, 1.4, false);
  expect_values(bgr.apply(img, {{2}}), {0, 0, 18.15f, 58.15f, 78.15f, 98.15f});
  // Read as RGB: gray 18.15 and 58.15, mean 38.15.
  expect_values(Contrast(0.6, 1.4, true).apply(img, {{2}}), {0, 1.85f, 21.85f, 61.85f, 81.85f, 101.85f});
  // Per-channel means (30, 40, 50); r = 0.5.
  expect_values(Contrast(0.6, 1.4).apply(img, {{0.5}}), {20, 30, 40, 40, 50, 60});

  // Saturation (BGR): x * v + gray * (1 - v) per pixel.
  Saturation sat(0.4, false);
  expect_values(sat.apply(img3({10, 20, 30}, 1, 1), {{0.5}}), {15.925f, 20.925f, 25.925f});
  // v = 1.5; the second pixel's R: 1.5 * 250 - 0.5 * 226.69 = 261.655, clipped.
  expect_values(sat.apply(img3({10, 20, 30, 200, 220, 250}, 1, 2), {{1.5}}),
                {4.075f, 19.075f, 34.075f, 186.655f, 216.655f, 255});
  expect_error([&] { sat.apply(ramp(2, 2, 2), {{1.0}}); }, {"Saturation", "3 channels", "f32[2, 2, 2]"});

  // Lighting, fbresnet's constants for BGR: in RGB terms the offset is
  // eigvec_rgb @ (alpha_rgb * eigval_rgb), alpha_rgb the BGR draw reversed.
  const double eigval[3] = {0.2175 * 255, 0.0188 * 255, 0.0045 * 255};
  const double eigvec[3][3] = {{-0.5675, 0.7192, 0.4009}, {-0.5808, -0.0045, -0.8140}, {-0.5836, -0.6948, 0.4203}};
  const double alpha_bgr[3] = {0.1, -0.2, 0.05};
  double off_rgb[3];
  for (int i = 0; i < 3; ++i) {
    off_rgb[i] = 0;
    for (int j = 0; j < 3; ++j) off_rgb[i] += eigvec[i][j] * alpha_bgr[2 - j] * eigval[j];
  }
  auto light = Lighting::imagenet_bgr();
  const AugParams a{{0.1, -0.2, 0.05}};
  std::array<float, 3> off = light->offset(a);
  for (int c = 0; c < 3; ++c) EXPECT_NEAR(off[static_cast<size_t>(c)], off_rgb[2 - c], 1e-4) << c;
  Tensor lit = light->apply(img3({10, 20, 30, 254.5f, 1, 128}, 1, 2), a);
  expect_values(lit, {static_cast<float>(10 + off_rgb[2]), static_cast<float>(20 + off_rgb[1]),
                      static_cast<float>(30 + off_rgb[0]), std::min(255.f, static_cast<float>(254.5 + off_rgb[2])),
                      std::max(0.f, static_cast<float>(1 + off_rgb[1])), static_cast<float>(128 + off_rgb[0])});
  // Draws: alpha ~ N(0, 0.1^2) per component.
  double sum = 0, sq = 0;
  const int n = 3000;
  for (int i = 0; i < n; ++i)
    for (double x : light->get_params(Shape{2, 2, 3}).v) {
      sum += x;
      sq += x * x;
    }
  EXPECT_NEAR(sum / (3 * n), 0.0, 0.006);
  EXPECT_NEAR(std::sqrt(sq / (3 * n)), 0.1, 0.005);

  // ToUint8: clip, then truncate toward zero (no rounding); NaN -> 0. ToFloat32: unchanged.
  Tensor raw = Tensor::from_vector<float>({1, 6}, {-3.5f, 0.4f, 12.99f, 254.7f, 300.f, std::nanf("")});
  expect_values(ToUint8().augment(raw), {0, 0, 12, 254, 255, 0}, 0);
  expect_values(ToFloat32().augment(img), img.to_vector<float>(), 0);
}

TEST(ImgAug, DrawsAreInRangeAndDeterministic) {
  // Factor draws lie in their ranges.
  BrightnessScale b(0.6, 1.4, true, 1);
  Saturation s(0.4, false, true, 1);
  for (int i = 0; i < 500; ++i) {
    const double v = b.get_params(Shape{1, 1, 3}).v[0];
    EXPECT_TRUE(v >= 0.6 && v < 1.4) << v;
    const double w = s.get_params(Shape{1, 1, 3}).v[0];
    EXPECT_TRUE(w >= 0.6 && w <= 1.4) << w;
  }
  // Same seed, same outputs; another seed or reseed changes them; reseed replays.
  Tensor img = ramp(20, 30, 3);
  auto run = [&](AugmentorList& list) {
    std::vector<std::vector<float>> out;
    for (int i = 0; i < 6; ++i) out.push_back(list.augment(img).to_vector<float>());
    return out;
  };
  auto a = fbresnet_augmentor(true, 11), a2 = fbresnet_augmentor(true, 11), c = fbresnet_augmentor(true, 12);
  const auto ra = run(*a);
  EXPECT_EQ(run(*a2), ra);
  EXPECT_NE(run(*c), ra);
  for (const auto& o : ra) {
    ASSERT_EQ(o.size(), 224u * 224 * 3);
    for (float x : o) ASSERT_TRUE(x >= 0 && x <= 255 && x == std::trunc(x)) << x;
  }
  a->reseed(5);
  const auto r5 = run(*a);
  a->reseed(5);
  EXPECT_EQ(run(*a), r5);
  EXPECT_NE(r5, ra);
  // Two kinds with one seed draw different streams.
  EXPECT_NE(BrightnessScale(0, 1, true, 7).get_params(Shape{1, 1, 3}).v,
            Contrast(0, 1, false, true, 7).get_params(Shape{1, 1, 3}).v);
  // Validation: ResizeShortestEdge(256) + CenterCrop(224).
  EXPECT_EQ(fbresnet_augmentor(false)->augment(ramp(300, 400, 3)).type_string(), "f32[224, 224, 3]");
  EXPECT_EQ(fbresnet_augmentor(false)->augmentors().size(), 2u);
  // CIFAR: paste to 40x40, crop 32, flip.
  Tensor cifar = cifar_augmentor(true, 2)->augment(ramp(32, 32, 3));
  EXPECT_EQ(cifar.type_string(), "f32[32, 32, 3]");
  EXPECT_EQ(cifar_augmentor(false)->augment(img).to_vector<float>(), img.to_vector<float>());
}

// x * a + b (a deterministic member to see RandomOrderAug's orders).
class Affine : public ImageAugmentor {
 public:
  Affine(float a, float b) : ImageAugmentor(0, "Affine"), a_(a), b_(b) {}
  std::string name() const override { return "Affine"; }
  Tensor apply(const Tensor& img, const AugParams&) const override {
    std::vector<float> v = img.to_vector<float>();
    for (float& x : v) x = x * a_ + b_;
    return Tensor::from_vector<float>(img.shape(), v);
  }

 private:
  float a_, b_;
};

TEST(ImgAug, RandomOrderAndLists) {
  // (x * 2) + 1 or (x + 1) * 2: both orders, about equally often.
  RandomOrderAug order({std::make_shared<BrightnessScale>(2, 2, false), std::make_shared<Affine>(1, 1)}, 3);
  Tensor one = Tensor::from_vector<float>({1, 1, 1}, {5});
  std::map<float, int> seen;
  for (int i = 0; i < 1000; ++i) seen[order.augment(one).item<float>()]++;
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_GT(seen[11.0f], 400);
  EXPECT_GT(seen[12.0f], 400);
  // Three members 2x, x + 1, 3x + 7: the 6 orders give 6x + {10, 8, 13, 20, 15, 16}; all appear.
  RandomOrderAug three({std::make_shared<BrightnessScale>(2, 2, false), std::make_shared<Affine>(1, 1),
                        std::make_shared<Affine>(3, 7)},
                       4);
  std::map<float, int> results;
  for (int i = 0; i < 600; ++i) results[three.augment(one).item<float>()]++;
  ASSERT_EQ(results.size(), 6u);
  for (float r : {40.f, 38.f, 43.f, 50.f, 45.f, 46.f}) EXPECT_GT(results[r], 60) << r;
  expect_error([&] { three.apply(one, {}); }, {"RandomOrderAug", "apply() is not available"});
  // AugmentorList applies in order.
  AugmentorList list({std::make_shared<Affine>(1, 1), std::make_shared<BrightnessScale>(3, 3, false)});
  EXPECT_EQ(list.augment(one).item<float>(), 18.0f);
  expect_error([&] { list.apply(one, {}); }, {"AugmentorList", "apply() is not available"});
  expect_error([] { AugmentorList({nullptr}); }, {"AugmentorList", "augmentor 0 is null"});
}

TEST(ImgAug, AugmentImageComponent) {
  std::vector<Datapoint> dps;
  for (int i = 0; i < 6; ++i) dps.push_back({Tensor::scalar<int64_t>(i), ramp(4 + (i == 4 ? -2 : 0), 5, 3)});
  auto src = std::make_shared<DataFromList>(dps, false);
  // Component 1 (image 4 is too small for the crop: an error naming the augmentor).
  auto strict = std::make_shared<AugmentImageComponent>(
      src, std::vector<AugmentorPtr>{std::make_shared<CenterCrop>(3, 3), std::make_shared<BrightnessScale>(2, 2)}, 1);
  EXPECT_EQ(strict->name(), "AugmentImageComponent");
  strict->reset_state();
  strict->begin_epoch();
  Datapoint dp;
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(strict->next(dp));
    EXPECT_EQ(dp[0].item<int64_t>(), i);
    // CenterCrop 3x3 of 4x5 at (0, 1), doubled.
    EXPECT_EQ(dp[1].type_string(), "f32[3, 3, 3]");
    EXPECT_EQ(dp[1].to_vector<float>()[0], 2 * 2.0f);
  }
  expect_error([&] { strict->next(dp); }, {"CenterCrop", "smaller than the crop 3x3"});
  // catch_exceptions: image 4 skipped.
  auto lenient = std::make_shared<AugmentImageComponent>(
      std::make_shared<DataFromList>(dps, false), std::vector<AugmentorPtr>{std::make_shared<CenterCrop>(3, 3)}, -1,
      /*catch_exceptions=*/true);
  lenient->reset_state();
  std::vector<int64_t> ids;
  for (Datapoint& d : lenient->epoch()) ids.push_back(d[0].item<int64_t>());
  EXPECT_EQ(ids, (std::vector<int64_t>{0, 1, 2, 3, 5}));
}

TEST(ImgAug, PipelineFromFilesThroughThreadsAndBatches) {
  // ILSVRC12Files -> MultiThreadMapData(decode + augment, 3 threads) -> BatchData,
  // with images of different sizes made equal by the augmentation.
  TempDir dir;
  int id = 0;
  for (const char* wnid : {"n1", "n2"}) {
    std::filesystem::create_directories(dir.file(std::string("train/") + wnid));
    for (int k = 0; k < 5; ++k, ++id) {
      PngSpec s;
      s.width = 9 + id;
      s.height = 7 + 2 * k;
      for (int p = 0; p < s.width * s.height; ++p)
        s.samples.insert(s.samples.end(), {static_cast<uint16_t>(id * 20 + 1), static_cast<uint16_t>(p % 200),
                                           static_cast<uint16_t>(200 - id)});
      write_bytes_file(dir.file(str_cat("train/", wnid, "/", k, ".png")), encode_png(s));
    }
  }
  auto files = std::make_shared<ILSVRC12Files>(dir.str(), "train");
  auto aug = std::make_shared<AugmentorList>(std::vector<AugmentorPtr>{
      std::make_shared<GoogleNetRandomCropAndResize>(0.08, 1.0, 0.75, 1.333, 6, Interp::kCubic, 1),
      std::make_shared<Flip>(true, false, 0.5, 1)});
  ImageFileDecoder decode;
  MapData::Func augment = augment_component_func(aug, 0);
  auto mapped = std::make_shared<MultiThreadMapData>(
      files, 3, [decode, augment](Datapoint dp) -> std::optional<Datapoint> {
        std::optional<Datapoint> d = decode(std::move(dp));
        return d ? augment(std::move(*d)) : d;
      });
  auto batches = std::make_shared<BatchData>(mapped, 4);
  EXPECT_EQ(batches->size(), 2);
  batches->reset_state();
  for (int epoch = 0; epoch < 2; ++epoch) {
    int n = 0;
    for (Datapoint& b : batches->epoch()) {
      ++n;
      EXPECT_EQ(b[0].type_string(), "f32[4, 6, 6, 3]");
      EXPECT_EQ(b[1].type_string(), "i64[4]");
      std::vector<float> v = b[0].to_vector<float>();
      std::vector<int64_t> labels = b[1].to_vector<int64_t>();
      for (size_t i = 0; i < 4; ++i) {
        // Red (channel 2 in BGR) is id * 20 + 1 everywhere in image id; blue 200 - id
        // (resizing a constant gives it back up to rounding).
        const float red = v[i * 108 + 2], blue = v[i * 108];
        const int img_id = static_cast<int>(std::lround((red - 1) / 20));
        EXPECT_NEAR(red, img_id * 20 + 1.0f, 1e-3);
        EXPECT_NEAR(blue, 200.0f - static_cast<float>(img_id), 1e-3);
        EXPECT_EQ(labels[i], img_id / 5);
      }
    }
    EXPECT_EQ(n, 2);
  }
}

}  // namespace
}  // namespace spire::testing
