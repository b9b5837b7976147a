// Image files for the input pipeline: decoding JPEG (libjpeg-turbo) and PNG
// (libpng) files into f32 HWC tensors, as tensorpack's datasets do with
// cv2.imread(path, cv2.IMREAD_COLOR), and the pieces that let a DataFlow
// carry file paths and decode them in parallel (MultiThreadMapData in
// train/dataflow.h). train/imagenet_folder.h reads folders of such files;
// train/imgaug.h augments the decoded images.
//
// Decoded images are f32 [H, W, 3] holding the 8-bit values 0..255 (Spire
// has no uint8 dtype), in **BGR** channel order by default, as cv2.imread
// returns them and tensorpack's ImageNet models expect. Like IMREAD_COLOR,
// grayscale images are expanded to 3 equal channels, an alpha channel is
// dropped (not composited), 16-bit PNG samples keep their high byte, palette
// PNGs are expanded, and CMYK/YCCK JPEGs (Adobe's inverted CMYK) are
// converted as OpenCV does (c' = k - (255 - c) * k / 256 per channel).
//
// The format is told by the file's first bytes, never by its name (ImageNet
// has a PNG named .JPEG). A file that is neither JPEG nor PNG, corrupt or
// truncated throws spire::Error naming it; libjpeg's and libpng's error
// paths never exit or abort the process, and nothing leaks. JPEG warnings
// that mean lost image data (premature end of file, premature end of a data
// segment, a bad Huffman code, a lost restart marker) are errors too; the
// others (e.g. extraneous bytes between segments, which cv2 accepts with a
// warning) are ignored.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/tensor.h"
#include "train/dataflow.h"

namespace spire {

/// The formats decode_image reads.
enum class ImageFormat { kUnknown, kJpeg, kPng };

/// The format of encoded image bytes by their signature: JPEG starts with
/// FF D8 FF, PNG with 89 'P' 'N' 'G' 0D 0A 1A 0A; anything else is kUnknown.
ImageFormat detect_image_format(const uint8_t* data, size_t size);

/// Channel order of decoded color images.
enum class ColorOrder {
  kBGR,  // cv2.imread's order (the default, what tensorpack's pipelines use)
  kRGB,
};

struct ImageDecodeOptions {
  ColorOrder order = ColorOrder::kBGR;
  /// Images with more pixels (width * height) are rejected before any pixel
  /// memory is allocated, so a small file claiming a huge size cannot
  /// exhaust memory. The default is far above any ImageNet image.
  int64_t max_pixels = int64_t{1} << 28;
};

/// Decodes the JPEG or PNG image in data[0, size) into f32 [H, W, 3] (see
/// the file comment). `name` (usually the file's path) is named in errors.
Tensor decode_image(const uint8_t* data, size_t size, const std::string& name,
                    const ImageDecodeOptions& options = {});

/// Reads and decodes the image file at `path`; throws spire::Error naming
/// the file when it cannot be read or decoded.
Tensor read_image(const std::string& path, const ImageDecodeOptions& options = {});

/// Spire has no string dtype: a datapoint component holding a string (a
/// file path) is an i32 [len] tensor of the string's bytes (0..255).
Tensor string_to_tensor(const std::string& s);
/// The string held by an i32 [len] tensor made by string_to_tensor; throws
/// for another dtype or rank, or a value outside 0..255.
std::string tensor_to_string(const Tensor& t);

/// A map function for MapData / MultiThreadMapData that replaces component
/// `index` of a datapoint, a file path (string_to_tensor), by the decoded
/// image (read_image), keeping the other components: {path, label} ->
/// {image, label}, as tensorpack's val pipeline decodes ILSVRC12Files in its
/// MultiThreadMapData map function.
///
/// With skip_bad_images, an image that cannot be read or decoded is skipped
/// (the function returns std::nullopt, so the datapoint is dropped), logged
/// with its path and counted; otherwise the spire::Error propagates. Copies
/// share one count. Safe to call from several threads at once.
class ImageFileDecoder {
 public:
  explicit ImageFileDecoder(int index = 0, bool skip_bad_images = false,
                            ImageDecodeOptions options = {});
  std::optional<Datapoint> operator()(Datapoint dp) const;
  /// Images skipped so far by this decoder and its copies.
  int64_t skipped() const;

 private:
  struct State;
  int index_;
  bool skip_bad_;
  ImageDecodeOptions options_;
  std::shared_ptr<State> state_;
};

}  // namespace spire
