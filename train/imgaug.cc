// Implementation of the image augmentors of train/imgaug.h.
#include "train/imgaug.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/logger.h"

namespace spire {
namespace {

uint64_t mix64(uint64_t a, uint64_t b) {
  uint64_t z = a + 0x9E3779B97F4A7C15ull * (b + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t fnv1a(const char* s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; ++s) h = (h ^ static_cast<unsigned char>(*s)) * 0x100000001b3ull;
  return h;
}

// An image's geometry: [H, W, C], or [H, W] read as C = 1.
struct Geom {
  int64_t h, w, c;
  bool rank2;
  Shape shape(int64_t nh, int64_t nw) const { return rank2 ? Shape{nh, nw} : Shape{nh, nw, c}; }
};

Geom geom_of(const Shape& s, const std::string& who) {
  SPIRE_CHECK(s.rank() == 2 || s.rank() == 3, who, ": expected an image [H, W, C] or [H, W], got shape ",
              s.to_string());
  Geom g{s.dim(0), s.dim(1), s.rank() == 3 ? s.dim(2) : 1, s.rank() == 2};
  SPIRE_CHECK(g.h > 0 && g.w > 0 && g.c > 0, who, ": empty image of shape ", s.to_string());
  return g;
}

Geom check_image(const Tensor& img, const std::string& who) {
  SPIRE_CHECK(img.defined(), who, ": the image is undefined");
  SPIRE_CHECK(img.dtype() == DType::F32, who, ": expected an f32 image, got ", img.type_string());
  return geom_of(img.shape(), who);
}

void check_channels3(const Geom& g, const Tensor& img, const std::string& who) {
  SPIRE_CHECK(!g.rank2 && g.c == 3, who, ": expected an image with 3 channels [H, W, 3], got ",
              img.type_string());
}

void check_params(const AugParams& p, size_t n, const std::string& who) {
  SPIRE_CHECK(p.v.size() == n, who, ": expected ", n, " parameters, got ", p.v.size());
}

float clip255(float x) { return std::min(std::max(x, 0.0f), 255.0f); }

Tensor crop(const Tensor& img, const Geom& g, int64_t y0, int64_t x0, int64_t h, int64_t w,
            const std::string& who) {
  SPIRE_CHECK(y0 >= 0 && x0 >= 0 && h > 0 && w > 0 && y0 + h <= g.h && x0 + w <= g.w, who,
              ": the crop window y0=", y0, " x0=", x0, " h=", h, " w=", w,
              " does not fit the image ", img.type_string());
  Tensor out(DType::F32, g.shape(h, w));
  const float* src = img.data<float>();
  float* dst = out.data<float>();
  const int64_t row = w * g.c;
  for (int64_t y = 0; y < h; ++y)
    std::copy(src + ((y0 + y) * g.w + x0) * g.c, src + ((y0 + y) * g.w + x0) * g.c + row,
              dst + y * row);
  return out;
}

// cv2's bicubic weights (a = -0.75) for the fraction x.
void cubic_coeffs(float x, float* c) {
  const float A = -0.75f;
  c[0] = ((A * (x + 1) - 5 * A) * (x + 1) + 8 * A) * (x + 1) - 4 * A;
  c[1] = ((A + 2) * x - (A + 3)) * x * x + 1;
  c[2] = ((A + 2) * (1 - x) - (A + 3)) * (1 - x) * (1 - x) + 1;
  c[3] = 1.f - c[0] - c[1] - c[2];
}

// For each output position: k source indices (clamped: border replicated) and weights.
struct Taps {
  int k;
  std::vector<int64_t> idx;
  std::vector<float> w;
};

Taps make_taps(int64_t in, int64_t out, Interp interp) {
  Taps t;
  t.k = interp == Interp::kLinear ? 2 : 4;
  t.idx.resize(static_cast<size_t>(out * t.k));
  t.w.resize(static_cast<size_t>(out * t.k));
  const double scale = 1.0 / (static_cast<double>(out) / static_cast<double>(in));
  for (int64_t d = 0; d < out; ++d) {
    float f = static_cast<float>((d + 0.5) * scale - 0.5);
    const auto s = static_cast<int64_t>(std::floor(f));
    f -= static_cast<float>(s);
    int64_t* idx = t.idx.data() + d * t.k;
    float* w = t.w.data() + d * t.k;
    const int64_t first = interp == Interp::kLinear ? s : s - 1;
    for (int j = 0; j < t.k; ++j) idx[j] = std::min(std::max(first + j, int64_t{0}), in - 1);
    if (interp == Interp::kLinear) {
      w[0] = 1.f - f;
      w[1] = f;
    } else {
      cubic_coeffs(f, w);
    }
  }
  return t;
}

}  // namespace

// ---- ImgAugRng ---------------------------------------------------------------------------

double ImgAugRng::uniform(double lo, double hi) {
  const double u = static_cast<double>(gen_() >> 11) * (1.0 / 9007199254740992.0);  // [0, 1)
  return lo + (hi - lo) * u;
}

int64_t ImgAugRng::randint(int64_t lo, int64_t hi) {
  SPIRE_CHECK(hi > lo, "ImgAugRng::randint: empty range [", lo, ", ", hi, ")");
  const uint64_t range = static_cast<uint64_t>(hi - lo);
  const uint64_t limit = std::numeric_limits<uint64_t>::max() - std::numeric_limits<uint64_t>::max() % range;
  uint64_t r;
  do r = gen_();
  while (r >= limit);
  return lo + static_cast<int64_t>(r % range);
}

double ImgAugRng::normal() {
  double u1;
  do u1 = uniform();
  while (u1 <= 0.0);
  const double u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

std::vector<int64_t> ImgAugRng::permutation(int64_t n) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = i;
  for (int64_t i = n - 1; i > 0; --i) std::swap(p[static_cast<size_t>(i)], p[static_cast<size_t>(randint(0, i + 1))]);
  return p;
}

// ---- ImageAugmentor ----------------------------------------------------------------------

ImageAugmentor::ImageAugmentor(uint64_t seed, const char* kind)
    : kind_hash_(fnv1a(kind)), rng_(mix64(seed, kind_hash_)) {}

AugParams ImageAugmentor::draw(const Shape&, ImgAugRng&) { return {}; }

AugParams ImageAugmentor::get_params(const Shape& shape) {
  std::lock_guard<std::mutex> lock(mu_);
  return draw(shape, rng_);
}

Tensor ImageAugmentor::augment(const Tensor& img) {
  SPIRE_CHECK(img.defined(), name(), ": the image is undefined");
  return apply(img, get_params(img.shape()));
}

void ImageAugmentor::reseed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(mu_);
  rng_.seed(mix64(seed, kind_hash_));
}

// ---- resize --------------------------------------------------------------------------------

Tensor resize_image(const Tensor& img, int64_t new_h, int64_t new_w, Interp interp) {
  const Geom g = check_image(img, "resize_image");
  SPIRE_CHECK(new_h > 0 && new_w > 0, "resize_image: the new size ", new_h, "x", new_w,
              " must be positive (image ", img.type_string(), ")");
  const Taps tx = make_taps(g.w, new_w, interp), ty = make_taps(g.h, new_h, interp);
  const float* src = img.data<float>();
  const int64_t c = g.c;
  // Horizontal pass over every source row, then the vertical pass.
  std::vector<float> rows(static_cast<size_t>(g.h * new_w * c));
  for (int64_t y = 0; y < g.h; ++y)
    for (int64_t dx = 0; dx < new_w; ++dx)
      for (int64_t ch = 0; ch < c; ++ch) {
        const int64_t* ix = tx.idx.data() + dx * tx.k;
        const float* wx = tx.w.data() + dx * tx.k;
        float acc = src[(y * g.w + ix[0]) * c + ch] * wx[0];
        for (int j = 1; j < tx.k; ++j) acc += src[(y * g.w + ix[j]) * c + ch] * wx[j];
        rows[static_cast<size_t>((y * new_w + dx) * c + ch)] = acc;
      }
  Tensor out(DType::F32, g.shape(new_h, new_w));
  float* dst = out.data<float>();
  const int64_t row = new_w * c;
  for (int64_t dy = 0; dy < new_h; ++dy) {
    const int64_t* iy = ty.idx.data() + dy * ty.k;
    const float* wy = ty.w.data() + dy * ty.k;
    for (int64_t i = 0; i < row; ++i) {
      float acc = rows[static_cast<size_t>(iy[0] * row + i)] * wy[0];
      for (int j = 1; j < ty.k; ++j) acc += rows[static_cast<size_t>(iy[j] * row + i)] * wy[j];
      dst[dy * row + i] = acc;
    }
  }
  return out;
}

// ---- geometric -----------------------------------------------------------------------------

CenterPaste::CenterPaste(int64_t bg_h, int64_t bg_w, float fill, uint64_t seed)
    : ImageAugmentor(seed, "CenterPaste"), bg_h_(bg_h), bg_w_(bg_w), fill_(fill) {
  SPIRE_CHECK(bg_h > 0 && bg_w > 0, "CenterPaste: the background ", bg_h, "x", bg_w,
              " must be positive");
}

Tensor CenterPaste::apply(const Tensor& img, const AugParams&) const {
  const Geom g = check_image(img, name());
  SPIRE_CHECK(g.h <= bg_h_ && g.w <= bg_w_, name(), ": the image ", img.type_string(),
              " does not fit the background ", bg_h_, "x", bg_w_);
  Tensor out = Tensor::full(DType::F32, g.shape(bg_h_, bg_w_), fill_);
  const auto y0 = static_cast<int64_t>((bg_h_ - g.h) * 0.5);
  const auto x0 = static_cast<int64_t>((bg_w_ - g.w) * 0.5);
  const float* src = img.data<float>();
  float* dst = out.data<float>();
  for (int64_t y = 0; y < g.h; ++y)
    std::copy(src + y * g.w * g.c, src + (y + 1) * g.w * g.c, dst + ((y0 + y) * bg_w_ + x0) * g.c);
  return out;
}

RandomCrop::RandomCrop(int64_t h, int64_t w, uint64_t seed)
    : ImageAugmentor(seed, "RandomCrop"), h_(h), w_(w) {
  SPIRE_CHECK(h > 0 && w > 0, "RandomCrop: the crop ", h, "x", w, " must be positive");
}

AugParams RandomCrop::draw(const Shape& shape, ImgAugRng& rng) {
  const Geom g = geom_of(shape, name());
  SPIRE_CHECK(g.h >= h_ && g.w >= w_, name(), ": the image of shape ", shape.to_string(),
              " is smaller than the crop ", h_, "x", w_);
  const int64_t y0 = rng.randint(0, g.h - h_ + 1);
  const int64_t x0 = rng.randint(0, g.w - w_ + 1);
  return {{static_cast<double>(y0), static_cast<double>(x0)}};
}

Tensor RandomCrop::apply(const Tensor& img, const AugParams& p) const {
  const Geom g = check_image(img, name());
  check_params(p, 2, name());
  return crop(img, g, static_cast<int64_t>(p.v[0]), static_cast<int64_t>(p.v[1]), h_, w_, name());
}

CenterCrop::CenterCrop(int64_t h, int64_t w, uint64_t seed)
    : ImageAugmentor(seed, "CenterCrop"), h_(h), w_(w) {
  SPIRE_CHECK(h > 0 && w > 0, "CenterCrop: the crop ", h, "x", w, " must be positive");
}

Tensor CenterCrop::apply(const Tensor& img, const AugParams&) const {
  const Geom g = check_image(img, name());
  SPIRE_CHECK(g.h >= h_ && g.w >= w_, name(), ": the image ", img.type_string(),
              " is smaller than the crop ", h_, "x", w_);
  return crop(img, g, static_cast<int64_t>((g.h - h_) * 0.5), static_cast<int64_t>((g.w - w_) * 0.5),
              h_, w_, name());
}

Flip::Flip(bool horiz, bool vert, double prob, uint64_t seed)
    : ImageAugmentor(seed, "Flip"), horiz_(horiz), prob_(prob) {
  SPIRE_CHECK(horiz != vert, "Flip: exactly one of horiz and vert must be set (got horiz=", horiz,
              ", vert=", vert, "; use two Flips for both)");
}

AugParams Flip::draw(const Shape&, ImgAugRng& rng) {
  return {{rng.rand_range(0.0, 1.0) < prob_ ? 1.0 : 0.0}};
}

Tensor Flip::apply(const Tensor& img, const AugParams& p) const {
  const Geom g = check_image(img, name());
  check_params(p, 1, name());
  if (p.v[0] == 0.0) return img;
  Tensor out(DType::F32, img.shape());
  const float* src = img.data<float>();
  float* dst = out.data<float>();
  for (int64_t y = 0; y < g.h; ++y)
    for (int64_t x = 0; x < g.w; ++x) {
      const int64_t sy = horiz_ ? y : g.h - 1 - y, sx = horiz_ ? g.w - 1 - x : x;
      std::copy(src + (sy * g.w + sx) * g.c, src + (sy * g.w + sx + 1) * g.c, dst + (y * g.w + x) * g.c);
    }
  return out;
}

Resize::Resize(int64_t h, int64_t w, Interp interp, uint64_t seed)
    : ImageAugmentor(seed, "Resize"), h_(h), w_(w), interp_(interp) {
  SPIRE_CHECK(h > 0 && w > 0, "Resize: the size ", h, "x", w, " must be positive");
}

Tensor Resize::apply(const Tensor& img, const AugParams&) const {
  return resize_image(img, h_, w_, interp_);
}

ResizeShortestEdge::ResizeShortestEdge(int64_t size, Interp interp, uint64_t seed)
    : ImageAugmentor(seed, "ResizeShortestEdge"), size_(size), interp_(interp) {
  SPIRE_CHECK(size > 0, "ResizeShortestEdge: the size ", size, " must be positive");
}

std::array<int64_t, 2> ResizeShortestEdge::output_size(int64_t h, int64_t w) const {
  const double scale = static_cast<double>(size_) / static_cast<double>(std::min(h, w));
  if (h < w) return {size_, static_cast<int64_t>(scale * static_cast<double>(w) + 0.5)};
  return {static_cast<int64_t>(scale * static_cast<double>(h) + 0.5), size_};
}

Tensor ResizeShortestEdge::apply(const Tensor& img, const AugParams&) const {
  const Geom g = check_image(img, name());
  const std::array<int64_t, 2> hw = output_size(g.h, g.w);
  return resize_image(img, hw[0], hw[1], interp_);
}

GoogleNetRandomCropAndResize::GoogleNetRandomCropAndResize(double area_lo, double area_hi,
                                                           double aspect_lo, double aspect_hi,
                                                           int64_t target, Interp interp,
                                                           uint64_t seed)
    : ImageAugmentor(seed, "GoogleNetRandomCropAndResize"), area_lo_(area_lo), area_hi_(area_hi),
      aspect_lo_(aspect_lo), aspect_hi_(aspect_hi), target_(target), interp_(interp) {
  SPIRE_CHECK(area_lo > 0 && area_lo <= area_hi && aspect_lo > 0 && aspect_lo <= aspect_hi &&
                  target > 0,
              "GoogleNetRandomCropAndResize: bad ranges: area [", area_lo, ", ", area_hi,
              "], aspect ratio [", aspect_lo, ", ", aspect_hi, "], target ", target);
}

AugParams GoogleNetRandomCropAndResize::draw(const Shape& shape, ImgAugRng& rng) {
  const Geom g = geom_of(shape, name());
  const double area = static_cast<double>(g.h * g.w);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = rng.uniform(area_lo_, area_hi_) * area;
    const double aspect = rng.uniform(aspect_lo_, aspect_hi_);
    auto ww = static_cast<int64_t>(std::sqrt(target_area * aspect) + 0.5);
    auto hh = static_cast<int64_t>(std::sqrt(target_area / aspect) + 0.5);
    if (rng.uniform() < 0.5) std::swap(ww, hh);
    if (hh <= g.h && ww <= g.w && hh > 0 && ww > 0) {
      const int64_t x1 = rng.randint(0, g.w - ww + 1);
      const int64_t y1 = rng.randint(0, g.h - hh + 1);
      return {{1.0, static_cast<double>(y1), static_cast<double>(x1), static_cast<double>(hh),
               static_cast<double>(ww)}};
    }
  }
  return {{0.0}};
}

Tensor GoogleNetRandomCropAndResize::apply(const Tensor& img, const AugParams& p) const {
  const Geom g = check_image(img, name());
  SPIRE_CHECK(!p.v.empty(), name(), ": no parameters");
  if (p.v[0] == 0.0) {  // fallback: ResizeShortestEdge(target) + CenterCrop(target)
    const Tensor r = ResizeShortestEdge(target_, interp_).apply(img, {});
    return CenterCrop(target_, target_).apply(r, {});
  }
  check_params(p, 5, name());
  const Tensor c = crop(img, g, static_cast<int64_t>(p.v[1]), static_cast<int64_t>(p.v[2]),
                        static_cast<int64_t>(p.v[3]), static_cast<int64_t>(p.v[4]), name());
  return resize_image(c, target_, target_, interp_);
}

// ---- photometric ---------------------------------------------------------------------------

namespace {

// gray = 0.299 R + 0.587 G + 0.114 B of pixel px (3 channels, RGB or BGR order).
float gray_of(const float* px, bool rgb) {
  const float r = rgb ? px[0] : px[2], b = rgb ? px[2] : px[0];
  return 0.299f * r + 0.587f * px[1] + 0.114f * b;
}

}  // namespace

BrightnessScale::BrightnessScale(double lo, double hi, bool clip, uint64_t seed)
    : ImageAugmentor(seed, "BrightnessScale"), lo_(lo), hi_(hi), clip_(clip) {}

AugParams BrightnessScale::draw(const Shape&, ImgAugRng& rng) { return {{rng.rand_range(lo_, hi_)}}; }

Tensor BrightnessScale::apply(const Tensor& img, const AugParams& p) const {
  check_image(img, name());
  check_params(p, 1, name());
  const auto v = static_cast<float>(p.v[0]);
  Tensor out(DType::F32, img.shape());
  const float* src = img.data<float>();
  float* dst = out.data<float>();
  for (int64_t i = 0; i < img.num_elements(); ++i) dst[i] = clip_ ? clip255(src[i] * v) : src[i] * v;
  return out;
}

Contrast::Contrast(double lo, double hi, std::optional<bool> rgb, bool clip, uint64_t seed)
    : ImageAugmentor(seed, "Contrast"), lo_(lo), hi_(hi), rgb_(rgb), clip_(clip) {}

AugParams Contrast::draw(const Shape&, ImgAugRng& rng) { return {{rng.rand_range(lo_, hi_)}}; }

Tensor Contrast::apply(const Tensor& img, const AugParams& p) const {
  const Geom g = check_image(img, name());
  check_params(p, 1, name());
  const auto r = static_cast<float>(p.v[0]);
  const float* src = img.data<float>();
  const int64_t n = g.h * g.w;
  std::vector<float> mean(static_cast<size_t>(g.c));  // per channel (all equal with gray)
  if (rgb_.has_value() && !g.rank2) {
    check_channels3(g, img, name());
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += gray_of(src + 3 * i, *rgb_);
    std::fill(mean.begin(), mean.end(), static_cast<float>(sum / static_cast<double>(n)));
  } else {  // per channel (a 2-D image: its mean)
    std::vector<double> sum(static_cast<size_t>(g.c), 0.0);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < g.c; ++c) sum[static_cast<size_t>(c)] += src[i * g.c + c];
    for (int64_t c = 0; c < g.c; ++c)
      mean[static_cast<size_t>(c)] = static_cast<float>(sum[static_cast<size_t>(c)] / static_cast<double>(n));
  }
  Tensor out(DType::F32, img.shape());
  float* dst = out.data<float>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < g.c; ++c) {
      const float y = src[i * g.c + c] * r + mean[static_cast<size_t>(c)] * (1.0f - r);
      dst[i * g.c + c] = clip_ ? clip255(y) : y;
    }
  return out;
}

Saturation::Saturation(double alpha, bool rgb, bool clip, uint64_t seed)
    : ImageAugmentor(seed, "Saturation"), alpha_(alpha), rgb_(rgb), clip_(clip) {
  SPIRE_CHECK(alpha < 1, "Saturation: alpha ", alpha, " must be below 1");
}

AugParams Saturation::draw(const Shape&, ImgAugRng& rng) {
  return {{1.0f + rng.rand_range(-alpha_, alpha_)}};
}

Tensor Saturation::apply(const Tensor& img, const AugParams& p) const {
  const Geom g = check_image(img, name());
  check_channels3(g, img, name());
  check_params(p, 1, name());
  const auto v = static_cast<float>(p.v[0]);
  const float* src = img.data<float>();
  Tensor out(DType::F32, img.shape());
  float* dst = out.data<float>();
  for (int64_t i = 0; i < g.h * g.w; ++i) {
    const float gray = gray_of(src + 3 * i, rgb_) * (1.0f - v);
    for (int c = 0; c < 3; ++c) {
      const float y = src[3 * i + c] * v + gray;
      dst[3 * i + c] = clip_ ? clip255(y) : y;
    }
  }
  return out;
}

Lighting::Lighting(double std, std::array<float, 3> eigval,
                   std::array<std::array<float, 3>, 3> eigvec, bool clip, uint64_t seed)
    : ImageAugmentor(seed, "Lighting"), std_(std), eigval_(eigval), eigvec_(eigvec), clip_(clip) {}

std::shared_ptr<Lighting> Lighting::imagenet_bgr(double std, uint64_t seed) {
  const std::array<float, 3> eigval_rgb = {0.2175f * 255, 0.0188f * 255, 0.0045f * 255};
  const std::array<std::array<float, 3>, 3> eigvec_rgb = {{{-0.5675f, 0.7192f, 0.4009f},
                                                           {-0.5808f, -0.0045f, -0.8140f},
                                                           {-0.5836f, -0.6948f, 0.4203f}}};
  std::array<float, 3> eigval;
  std::array<std::array<float, 3>, 3> eigvec;
  for (int i = 0; i < 3; ++i) {
    eigval[i] = eigval_rgb[2 - i];
    for (int j = 0; j < 3; ++j) eigvec[i][j] = eigvec_rgb[2 - i][2 - j];
  }
  return std::make_shared<Lighting>(std, eigval, eigvec, true, seed);
}

AugParams Lighting::draw(const Shape& shape, ImgAugRng& rng) {
  const Geom g = geom_of(shape, name());
  SPIRE_CHECK(!g.rank2 && g.c == 3, name(), ": expected an image with 3 channels [H, W, 3], got shape ",
              shape.to_string());
  AugParams p;
  for (int i = 0; i < 3; ++i) p.v.push_back(static_cast<float>(rng.normal() * std_));
  return p;
}

std::array<float, 3> Lighting::offset(const AugParams& p) const {
  check_params(p, 3, name());
  std::array<float, 3> v, inc;
  for (int i = 0; i < 3; ++i) v[i] = static_cast<float>(p.v[static_cast<size_t>(i)]) * eigval_[i];
  for (int i = 0; i < 3; ++i) inc[i] = eigvec_[i][0] * v[0] + eigvec_[i][1] * v[1] + eigvec_[i][2] * v[2];
  return inc;
}

Tensor Lighting::apply(const Tensor& img, const AugParams& p) const {
  const Geom g = check_image(img, name());
  check_channels3(g, img, name());
  const std::array<float, 3> inc = offset(p);
  const float* src = img.data<float>();
  Tensor out(DType::F32, img.shape());
  float* dst = out.data<float>();
  for (int64_t i = 0; i < g.h * g.w; ++i)
    for (int c = 0; c < 3; ++c) {
      const float y = src[3 * i + c] + inc[static_cast<size_t>(c)];
      dst[3 * i + c] = clip_ ? clip255(y) : y;
    }
  return out;
}

ToUint8::ToUint8(uint64_t seed) : ImageAugmentor(seed, "ToUint8") {}

Tensor ToUint8::apply(const Tensor& img, const AugParams&) const {
  check_image(img, name());
  const float* src = img.data<float>();
  Tensor out(DType::F32, img.shape());
  float* dst = out.data<float>();
  for (int64_t i = 0; i < img.num_elements(); ++i)
    dst[i] = std::isnan(src[i]) ? 0.0f : std::trunc(clip255(src[i]));
  return out;
}

ToFloat32::ToFloat32(uint64_t seed) : ImageAugmentor(seed, "ToFloat32") {}

Tensor ToFloat32::apply(const Tensor& img, const AugParams&) const {
  check_image(img, name());
  return img;
}

// ---- composites ----------------------------------------------------------------------------

AugmentorList::AugmentorList(std::vector<AugmentorPtr> augmentors, uint64_t seed)
    : ImageAugmentor(seed, "AugmentorList"), augs_(std::move(augmentors)) {
  for (size_t i = 0; i < augs_.size(); ++i)
    SPIRE_CHECK(augs_[i] != nullptr, "AugmentorList: augmentor ", i, " is null");
}

Tensor AugmentorList::augment(const Tensor& img) {
  Tensor x = img;
  for (const AugmentorPtr& a : augs_) x = a->augment(x);
  return x;
}

Tensor AugmentorList::apply(const Tensor&, const AugParams&) const {
  throw_error(name(), ": apply() is not available (the members' parameters depend on the images "
              "the previous members produce); call augment(), or each member's apply()");
}

void AugmentorList::reseed(uint64_t seed) {
  ImageAugmentor::reseed(seed);
  for (size_t i = 0; i < augs_.size(); ++i) augs_[i]->reseed(mix64(seed, i));
}

RandomOrderAug::RandomOrderAug(std::vector<AugmentorPtr> augmentors, uint64_t seed)
    : ImageAugmentor(seed, "RandomOrderAug"), augs_(std::move(augmentors)) {
  for (size_t i = 0; i < augs_.size(); ++i)
    SPIRE_CHECK(augs_[i] != nullptr, "RandomOrderAug: augmentor ", i, " is null");
}

AugParams RandomOrderAug::draw(const Shape&, ImgAugRng& rng) {
  AugParams p;
  for (int64_t k : rng.permutation(static_cast<int64_t>(augs_.size()))) p.v.push_back(static_cast<double>(k));
  return p;
}

Tensor RandomOrderAug::augment(const Tensor& img) {
  // The permutation: this augmentor's own draw (get_params locks its generator).
  const AugParams order = get_params(img.shape());
  Tensor x = img;
  for (double k : order.v) x = augs_[static_cast<size_t>(k)]->augment(x);
  return x;
}

Tensor RandomOrderAug::apply(const Tensor&, const AugParams&) const {
  throw_error(name(), ": apply() is not available (each member draws its own parameters); "
              "call augment()");
}

void RandomOrderAug::reseed(uint64_t seed) {
  ImageAugmentor::reseed(seed);
  for (size_t i = 0; i < augs_.size(); ++i) augs_[i]->reseed(mix64(seed, i + 1));
}

// ---- DataFlow glue -------------------------------------------------------------------------

namespace {

MapDataComponent::Func augment_func(std::shared_ptr<AugmentorList> augs, bool catch_exceptions) {
  return [augs, catch_exceptions](Tensor img) -> std::optional<Tensor> {
    if (!catch_exceptions) return augs->augment(img);
    try {
      return augs->augment(img);
    } catch (const Error& e) {
      logger::warn_once("AugmentImageComponent: skipping a datapoint whose augmentation failed: ",
                        e.what());
      return std::nullopt;
    }
  };
}

}  // namespace

AugmentImageComponent::AugmentImageComponent(std::shared_ptr<DataFlow> ds,
                                             std::vector<AugmentorPtr> augmentors, int index,
                                             bool catch_exceptions)
    : MapDataComponent(std::move(ds),
                       augment_func(std::make_shared<AugmentorList>(std::move(augmentors)),
                                    catch_exceptions),
                       index) {}

MapData::Func augment_component_func(AugmentorPtr augmentor, int index) {
  SPIRE_CHECK(augmentor != nullptr, "augment_component_func: the augmentor is null");
  return [augmentor, index](Datapoint dp) -> std::optional<Datapoint> {
    const auto n = static_cast<int64_t>(dp.size());
    const int64_t idx = index < 0 ? index + n : index;
    SPIRE_CHECK(idx >= 0 && idx < n, "augment_component_func: index ", index,
                " is out of range for a datapoint with ", n, " components");
    dp[static_cast<size_t>(idx)] = augmentor->augment(dp[static_cast<size_t>(idx)]);
    return dp;
  };
}

std::shared_ptr<AugmentorList> fbresnet_augmentor(bool is_training, uint64_t seed) {
  std::vector<AugmentorPtr> augs;
  if (is_training) {
    augs.push_back(std::make_shared<GoogleNetRandomCropAndResize>(0.08, 1.0, 0.75, 1.333, 224,
                                                                  Interp::kCubic, seed));
    augs.push_back(std::make_shared<ToFloat32>(seed));
    augs.push_back(std::make_shared<RandomOrderAug>(
        std::vector<AugmentorPtr>{std::make_shared<BrightnessScale>(0.6, 1.4, true, seed),
                                  std::make_shared<Contrast>(0.6, 1.4, false, true, seed),
                                  std::make_shared<Saturation>(0.4, false, true, seed),
                                  Lighting::imagenet_bgr(0.1, seed)},
        seed));
    augs.push_back(std::make_shared<ToUint8>(seed));
    augs.push_back(std::make_shared<Flip>(true, false, 0.5, seed));
  } else {
    augs.push_back(std::make_shared<ResizeShortestEdge>(256, Interp::kCubic, seed));
    augs.push_back(std::make_shared<CenterCrop>(224, 224, seed));
  }
  return std::make_shared<AugmentorList>(std::move(augs), seed);
}

std::shared_ptr<AugmentorList> cifar_augmentor(bool is_training, uint64_t seed) {
  std::vector<AugmentorPtr> augs;
  if (is_training) {
    augs.push_back(std::make_shared<CenterPaste>(40, 40, 0.0f, seed));
    augs.push_back(std::make_shared<RandomCrop>(32, 32, seed));
    augs.push_back(std::make_shared<Flip>(true, false, 0.5, seed));
  }
  return std::make_shared<AugmentorList>(std::move(augs), seed);
}

}  // namespace spire
