// Image augmentors (tensorpack's dataflow.imgaug) for the input pipeline:
// geometric ones (CenterPaste, RandomCrop, CenterCrop, Flip, Resize,
// ResizeShortestEdge, GoogleNetRandomCropAndResize), photometric ones
// (BrightnessScale, Contrast, Saturation, Lighting, ToUint8, ToFloat32), the
// composites AugmentorList and RandomOrderAug, AugmentImageComponent (a
// DataFlow applying them to one component, train/dataflow.h) and tensorpack's
// fbresnet_augmentor and CIFAR augmentation as ready-made lists. Images come
// from train/image_io.h, train/imagenet_folder.h or train/datasets.h.
//
// Images are f32 [H, W, C] (or [H, W]) holding 0..255 (Spire has no uint8),
// BGR for decoded files. Names, parameters, defaults and formulas are
// tensorpack's; where tensorpack's result depends on uint8 arithmetic, the
// f32 result is kept (see each class). Every augmentor returns a new tensor
// and never writes into its input (tensorpack's copy=True is implied).
//
// Randomness: each augmentor owns a random generator (ImgAugRng) seeded from
// its `seed` and its kind (two augmentors of different kinds with the same
// seed draw independent streams; two of the same kind and seed draw the
// same). Its draws are deterministic given the seed and the sequence of
// images. augment() is thread-safe: the parameters are drawn under a lock,
// the pixels computed outside it; with several threads (MultiThreadMapData)
// which image gets which draw depends on the scheduling, so for a run that
// is reproducible bit for bit, augment in one thread (AugmentImageComponent
// before a PrefetchData). Draws follow tensorpack's order and ranges (e.g.
// _rand_range's float32 uniforms) but not numpy's bit streams.
//
// Resizing (resize_image) follows cv2.resize's coordinate mapping (pixel
// centers: src = (dst + 0.5) * in / out - 0.5) and kernels without
// antialiasing: kLinear (cv2.INTER_LINEAR, tensorpack's default) and kCubic
// (cv2.INTER_CUBIC, a = -0.75, border replicated; fbresnet's choice). It
// computes in f32 like cv2 on f32 images and does not round or saturate:
// where cv2 would round a uint8 image, Spire keeps the fraction, and a cubic
// result may overshoot [0, 255] slightly (clip with ToUint8 where wanted).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "train/dataflow.h"

namespace spire {

/// The random generator of an augmentor: mt19937_64 (the same stream on
/// every platform) with Spire's own distributions, so draws do not depend on
/// the standard library.
class ImgAugRng {
 public:
  explicit ImgAugRng(uint64_t seed = 0) : gen_(seed) {}
  void seed(uint64_t s) { gen_.seed(s); }
  /// Uniform double in [lo, hi) (numpy's rng.uniform).
  double uniform(double lo = 0.0, double hi = 1.0);
  /// tensorpack's _rand_range: a uniform draw rounded to float32.
  float rand_range(double lo, double hi) { return static_cast<float>(uniform(lo, hi)); }
  /// Uniform integer in [lo, hi) (numpy's rng.randint), unbiased.
  int64_t randint(int64_t lo, int64_t hi);
  /// Standard normal (Box-Muller).
  double normal();
  /// A uniformly random permutation of 0..n-1 (Fisher-Yates).
  std::vector<int64_t> permutation(int64_t n);

 private:
  std::mt19937_64 gen_;
};

/// The random parameters an augmentor drew for one image (crop offsets,
/// factors, ...; each class documents its own).
struct AugParams {
  std::vector<double> v;
};

/// Base of the augmentors (tensorpack's ImageAugmentor).
class ImageAugmentor {
 public:
  virtual ~ImageAugmentor() = default;
  ImageAugmentor(const ImageAugmentor&) = delete;
  ImageAugmentor& operator=(const ImageAugmentor&) = delete;

  virtual std::string name() const = 0;
  /// Augments one image: get_params() then apply(). Thread-safe.
  virtual Tensor augment(const Tensor& img);
  /// Draws the parameters for an image of `shape` from this augmentor's
  /// generator (thread-safe).
  AugParams get_params(const Shape& shape);
  /// Applies given parameters (no randomness): lets a caller replay a draw.
  virtual Tensor apply(const Tensor& img, const AugParams& params) const = 0;
  /// Restarts the generator from `seed` (composites reseed their members
  /// from it too).
  virtual void reseed(uint64_t seed);

 protected:
  /// `kind` keys the generator together with the seed (usually the class name).
  ImageAugmentor(uint64_t seed, const char* kind);
  /// Draws the parameters (called with the generator locked); none by default.
  virtual AugParams draw(const Shape& shape, ImgAugRng& rng);

 private:
  std::mutex mu_;
  uint64_t kind_hash_;
  ImgAugRng rng_;
};

using AugmentorPtr = std::shared_ptr<ImageAugmentor>;

/// Interpolation of resize_image (see the file comment).
enum class Interp { kLinear, kCubic };

/// Resizes img [H, W, C] or [H, W] to [new_h, new_w, ...] as cv2.resize.
Tensor resize_image(const Tensor& img, int64_t new_h, int64_t new_w, Interp interp = Interp::kLinear);

/// Pastes the image onto the center of a background of bg_h x bg_w filled
/// with `fill` (tensorpack's CenterPaste with ConstantBackgroundFiller), at
/// y0 = int((bg_h - H) * 0.5), x0 = int((bg_w - W) * 0.5). The image must fit.
class CenterPaste : public ImageAugmentor {
 public:
  CenterPaste(int64_t bg_h, int64_t bg_w, float fill = 0.0f, uint64_t seed = 0);
  std::string name() const override { return "CenterPaste"; }
  Tensor apply(const Tensor& img, const AugParams& p) const override;

 private:
  int64_t bg_h_, bg_w_;
  float fill_;
};

/// Crops a random h x w window: y0 = randint(H - h + 1) drawn first, then
/// x0 = randint(W - w + 1). Params {y0, x0}.
class RandomCrop : public ImageAugmentor {
 public:
  RandomCrop(int64_t h, int64_t w, uint64_t seed = 0);
  std::string name() const override { return "RandomCrop"; }
  Tensor apply(const Tensor& img, const AugParams& p) const override;

 protected:
  AugParams draw(const Shape& shape, ImgAugRng& rng) override;

 private:
  int64_t h_, w_;
};

/// Crops the h x w window at y0 = int((H - h) * 0.5), x0 = int((W - w) * 0.5).
class CenterCrop : public ImageAugmentor {
 public:
  CenterCrop(int64_t h, int64_t w, uint64_t seed = 0);
  std::string name() const override { return "CenterCrop"; }
  Tensor apply(const Tensor& img, const AugParams& p) const override;

 private:
  int64_t h_, w_;
};

/// Flips horizontally (or vertically) when rand_range(0, 1) < prob; exactly
/// one of horiz and vert must be set. Params {1 flip, 0 keep}.
class Flip : public ImageAugmentor {
 public:
  explicit Flip(bool horiz = true, bool vert = false, double prob = 0.5, uint64_t seed = 0);
  std::string name() const override { return "Flip"; }
  Tensor apply(const Tensor& img, const AugParams& p) const override;

 protected:
  AugParams draw(const Shape& shape, ImgAugRng& rng) override;

 private:
  bool horiz_;
  double prob_;
};

/// Resizes to h x w.
class Resize : public ImageAugmentor {
 public:
  Resize(int64_t h, int64_t w, Interp interp = Interp::kLinear, uint64_t seed = 0);
  std::string name() const override { return "Resize"; }
  Tensor apply(const Tensor& img, const AugParams& p) const override;

 private:
  int64_t h_, w_;
  Interp interp_;
};

/// Resizes so that the shorter side is `size`, keeping the aspect ratio:
/// scale = size / min(H, W); the longer side becomes int(scale * L + 0.5)
/// (when H == W, both are `size`).
class ResizeShortestEdge : public ImageAugmentor {
 public:
  explicit ResizeShortestEdge(int64_t size, Interp interp = Interp::kLinear, uint64_t seed = 0);
  std::string name() const override { return "ResizeShortestEdge"; }
  Tensor apply(const Tensor& img, const AugParams& p) const override;
  /// The output [new_h, new_w] for an input of h x w.
  std::array<int64_t, 2> output_size(int64_t h, int64_t w) const;

 private:
  int64_t size_;
  Interp interp_;
};

/// GoogLeNet's random crop as fb.resnet.torch does it: up to 10 tries of
/// area = uniform(area_lo, area_hi) * H * W, aspect r = uniform(aspect_lo,
/// aspect_hi), ww = int(sqrt(area * r) + 0.5), hh = int(sqrt(area / r) +
/// 0.5), swapped when uniform() < 0.5; the first that fits (hh <= H, ww <=
/// W) is cropped at x1 = randint(0, W - ww + 1), y1 = randint(0, H - hh + 1)
/// (x first) and resized to target x target. When none fits:
/// ResizeShortestEdge(target) then CenterCrop(target). Params {1, y1, x1,
/// hh, ww} or {0} for the fallback.
class GoogleNetRandomCropAndResize : public ImageAugmentor {
 public:
  explicit GoogleNetRandomCropAndResize(double area_lo = 0.08, double area_hi = 1.0,
                                        double aspect_lo = 0.75, double aspect_hi = 1.333,
                                        int64_t target = 224, Interp interp = Interp::kLinear,
                                        uint64_t seed = 0);
  std::string name() const override { return "GoogleNetRandomCropAndResize"; }
  Tensor apply(const Tensor& img, const AugParams& p) const override;

 protected:
  AugParams draw(const Shape& shape, ImgAugRng& rng) override;

 private:
  double area_lo_, area_hi_, aspect_lo_, aspect_hi_;
  int64_t target_;
  Interp interp_;
};

/// img * v with v = rand_range(lo, hi), then clipped to [0, 255] when clip.
/// Params {v}.
class BrightnessScale : public ImageAugmentor {
 public:
  BrightnessScale(double lo, double hi, bool clip = true, uint64_t seed = 0);
  std::string name() const override { return "BrightnessScale"; }
  Tensor apply(const Tensor& img, const AugParams& p) const override;

 protected:
  AugParams draw(const Shape& shape, ImgAugRng& rng) override;

 private:
  double lo_, hi_;
  bool clip_;
};

/// img * r + mean * (1 - r) with r = rand_range(lo, hi), then clipped when
/// clip. mean: with `rgb` set, the mean of the image's gray version (one
/// scalar; gray = 0.299 R + 0.587 G + 0.114 B, the channels read as RGB or
/// BGR per `rgb`); unset, the mean of each channel (tensorpack's rgb=None).
/// Params {r}.
class Contrast : public ImageAugmentor {
 public:
  Contrast(double lo, double hi, std::optional<bool> rgb = std::nullopt, bool clip = true,
           uint64_t seed = 0);
  std::string name() const override { return "Contrast"; }
  Tensor apply(const Tensor& img, const AugParams& p) const override;

 protected:
  AugParams draw(const Shape& shape, ImgAugRng& rng) override;

 private:
  double lo_, hi_;
  std::optional<bool> rgb_;
  bool clip_;
};

/// img * v + gray * (1 - v) per pixel with v = 1 + rand_range(-alpha,
/// alpha), gray as in Contrast; 3 channels. Note tensorpack's default
/// rgb=true, while Spire's decoded images are BGR: pass rgb=false for them
/// (fbresnet_augmentor does). Params {v}.
class Saturation : public ImageAugmentor {
 public:
  explicit Saturation(double alpha = 0.4, bool rgb = true, bool clip = true, uint64_t seed = 0);
  std::string name() const override { return "Saturation"; }
  Tensor apply(const Tensor& img, const AugParams& p) const override;

 protected:
  AugParams draw(const Shape& shape, ImgAugRng& rng) override;

 private:
  double alpha_;
  bool rgb_, clip_;
};

/// AlexNet's PCA lighting noise: a = normal(3) * std (float32), every pixel
/// gets eigvec @ (a * eigval) added (eigvec's columns are the eigenvectors),
/// then clipped when clip; 3 channels. Params {a0, a1, a2}.
class Lighting : public ImageAugmentor {
 public:
  Lighting(double std, std::array<float, 3> eigval, std::array<std::array<float, 3>, 3> eigvec,
           bool clip = true, uint64_t seed = 0);
  /// fb.resnet.torch's ImageNet constants as fbresnet_augmentor uses them,
  /// reversed for BGR images: eigval [0.2175, 0.0188, 0.0045] * 255 and
  /// eigvec rows [-0.5675, 0.7192, 0.4009], [-0.5808, -0.0045, -0.8140],
  /// [-0.5836, -0.6948, 0.4203] (RGB), both reversed.
  static std::shared_ptr<Lighting> imagenet_bgr(double std = 0.1, uint64_t seed = 0);
  std::string name() const override { return "Lighting"; }
  Tensor apply(const Tensor& img, const AugParams& p) const override;
  /// The per-channel offset eigvec @ (a * eigval) for params {a0, a1, a2}.
  std::array<float, 3> offset(const AugParams& p) const;

 protected:
  AugParams draw(const Shape& shape, ImgAugRng& rng) override;

 private:
  double std_;
  std::array<float, 3> eigval_;
  std::array<std::array<float, 3>, 3> eigvec_;
  bool clip_;
};

/// tensorpack's ToUint8 on f32: clip to [0, 255], then truncate toward zero
/// (numpy's astype, no rounding); NaN becomes 0. The result stays f32.
class ToUint8 : public ImageAugmentor {
 public:
  explicit ToUint8(uint64_t seed = 0);
  std::string name() const override { return "ToUint8"; }
  Tensor apply(const Tensor& img, const AugParams& p) const override;
};

/// tensorpack's ToFloat32: images are already f32, so the image is returned
/// as it is (kept so that tensorpack's lists translate one to one).
class ToFloat32 : public ImageAugmentor {
 public:
  explicit ToFloat32(uint64_t seed = 0);
  std::string name() const override { return "ToFloat32"; }
  Tensor apply(const Tensor& img, const AugParams& p) const override;
};

/// Applies the augmentors one after the other (each draws from its own
/// generator, on the image the previous ones produced). apply() is not
/// available (the parameters depend on intermediate images).
class AugmentorList : public ImageAugmentor {
 public:
  explicit AugmentorList(std::vector<AugmentorPtr> augmentors, uint64_t seed = 0);
  std::string name() const override { return "AugmentorList"; }
  Tensor augment(const Tensor& img) override;
  Tensor apply(const Tensor& img, const AugParams& p) const override;
  /// Reseeds member i from mix(seed, i).
  void reseed(uint64_t seed) override;
  const std::vector<AugmentorPtr>& augmentors() const { return augs_; }

 private:
  std::vector<AugmentorPtr> augs_;
};

/// Applies the augmentors in a random order: a fresh permutation per image
/// from its own generator. The members should not change the image's shape
/// (tensorpack's assumption). Unlike tensorpack, each member draws its
/// parameters when its turn comes (identical for the photometric members,
/// whose parameters do not depend on the image).
class RandomOrderAug : public ImageAugmentor {
 public:
  explicit RandomOrderAug(std::vector<AugmentorPtr> augmentors, uint64_t seed = 0);
  std::string name() const override { return "RandomOrderAug"; }
  Tensor augment(const Tensor& img) override;
  Tensor apply(const Tensor& img, const AugParams& p) const override;
  /// Reseeds itself from `seed` and member i from mix(seed, i + 1).
  void reseed(uint64_t seed) override;

 protected:
  /// Params: the order, a permutation of the members' indices.
  AugParams draw(const Shape& shape, ImgAugRng& rng) override;

 private:
  std::vector<AugmentorPtr> augs_;
};

/// Applies the augmentors (as an AugmentorList) to component `index` of each
/// datapoint (tensorpack's AugmentImageComponent). With catch_exceptions, a
/// datapoint whose augmentation throws spire::Error is skipped and the
/// error logged once per distinct message, as tensorpack does; otherwise
/// the error propagates.
class AugmentImageComponent : public MapDataComponent {
 public:
  AugmentImageComponent(std::shared_ptr<DataFlow> ds, std::vector<AugmentorPtr> augmentors,
                        int index = 0, bool catch_exceptions = false);
  std::string name() const override { return "AugmentImageComponent"; }

 protected:
  /// Its augmentors draw from generators of their own, which skipped passes
  /// would not advance: a resume reads through (exact, slower).
  bool passes_through_epochs() const override { return false; }
};

/// A map function for MapData / MultiThreadMapData applying `augmentor` to
/// component `index` (e.g. after ImageFileDecoder, as tensorpack's val
/// pipeline augments in its MultiThreadMapData map function).
MapData::Func augment_component_func(AugmentorPtr augmentor, int index = 0);

/// tensorpack's fbresnet_augmentor (imagenet_utils.py) for BGR images.
/// Training: GoogleNetRandomCropAndResize(224, cubic), ToFloat32,
/// RandomOrderAug[BrightnessScale(0.6, 1.4), Contrast(0.6, 1.4, rgb=false),
/// Saturation(0.4, rgb=false), Lighting::imagenet_bgr(0.1)], ToUint8,
/// Flip(horizontal). Validation: ResizeShortestEdge(256, cubic),
/// CenterCrop(224). Members are seeded from `seed`.
std::shared_ptr<AugmentorList> fbresnet_augmentor(bool is_training, uint64_t seed = 0);

/// cifar10-resnet.py's augmentation without its mean subtraction. Training:
/// CenterPaste(40, 40) on zeros, RandomCrop(32, 32), Flip(horizontal);
/// test: nothing (an empty list).
std::shared_ptr<AugmentorList> cifar_augmentor(bool is_training, uint64_t seed = 0);

}  // namespace spire
