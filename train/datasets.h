// Dataset readers (tensorpack's dataset.Mnist / dataset.Cifar10 /
// dataset.Cifar100): loaders for the MNIST IDX format (gzip-compressed or
// not; Fashion-MNIST uses the same format) and the CIFAR-10 and CIFAR-100
// binary formats, and DataFlows yielding their datapoints for the input
// pipeline in train/dataflow.h. ImageNet-style folders of JPEG/PNG files are
// read by train/imagenet_folder.h.
//
// Spire has no uint8 dtype, so images are f32 holding the raw pixel values
// 0..255 (normalize with MapDataComponent or in the graph) and labels are
// i64. Corrupt, truncated or missing files throw spire::Error naming the
// file and the expected and actual sizes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "train/dataflow.h"

namespace spire {

/// Images and labels of a dataset split.
struct ImageLabelData {
  Tensor images;  // f32: [N, rows, cols] for MNIST, [N, 32, 32, 3] (HWC, RGB) for CIFAR
  Tensor labels;  // i64 [N]
};

/// Reads a whole file, decompressing it when it starts with the gzip magic
/// bytes 1f 8b; throws when it cannot be opened or the gzip stream is corrupt
/// or truncated.
std::vector<uint8_t> read_maybe_gzip_file(const std::string& path);

/// Reads an IDX image file (magic 0x00000803) and an IDX label file (magic
/// 0x00000801), each gzip-compressed or not. Checks the magic numbers, the
/// file sizes against the header and that both hold the same count.
/// images: f32 [N, rows, cols] with values 0..255; labels: i64 [N].
ImageLabelData load_mnist_idx(const std::string& images_path, const std::string& labels_path);

/// Reads CIFAR-10 binary batch files (records of 1 label byte + 3072 pixel
/// bytes, channel-major R, G, B planes of 32x32) and concatenates them.
/// images: f32 [N, 32, 32, 3] (HWC, values 0..255); labels: i64 [N] (0..9).
ImageLabelData load_cifar10_bin(const std::vector<std::string>& paths);

/// Which CIFAR-100 label becomes the datapoint's label.
enum class Cifar100Label {
  kFine,    // the 100 classes (0..99), tensorpack's default
  kCoarse,  // the 20 superclasses (0..19)
};

/// Reads CIFAR-100 binary files (records of 2 label bytes, coarse then fine,
/// + 3072 pixel bytes laid out as in CIFAR-10) and concatenates them; the same
/// record reader as load_cifar10_bin. images: f32 [N, 32, 32, 3] (HWC, RGB,
/// values 0..255); labels: i64 [N], the fine (0..99) or coarse (0..19) label.
ImageLabelData load_cifar100_bin(const std::vector<std::string>& paths,
                                 Cifar100Label label_mode = Cifar100Label::kFine);

/// Splits images [N, ...] and labels [N] into N datapoints {image, label}
/// (image: the per-example slice, label: i64 scalar).
std::vector<Datapoint> image_label_datapoints(const ImageLabelData& data);

/// MNIST (or Fashion-MNIST) split as a DataFlow: datapoints {image f32
/// [28, 28] in 0..255, label i64 scalar}. `train_or_test` is "train" (60000
/// images) or "test" (10000); `dir` holds train-images-idx3-ubyte.gz,
/// train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz,
/// t10k-labels-idx1-ubyte.gz (or the same names without .gz, uncompressed).
/// Shuffling follows DataFromList (order a function of seed and epoch).
class Mnist : public DataFromList {
 public:
  Mnist(const std::string& train_or_test, const std::string& dir, bool shuffle = true,
        uint64_t seed = 0);
  std::string name() const override { return "Mnist"; }
};

/// CIFAR-10 split as a DataFlow: datapoints {image f32 [32, 32, 3] HWC (RGB)
/// in 0..255, label i64 scalar}. "train" reads data_batch_1.bin ..
/// data_batch_5.bin, "test" reads test_batch.bin, from `dir` or from
/// `dir`/cifar-10-batches-bin (the extracted binary-version archive).
class Cifar10 : public DataFromList {
 public:
  Cifar10(const std::string& train_or_test, const std::string& dir, bool shuffle = true,
          uint64_t seed = 0);
  std::string name() const override { return "Cifar10"; }
};

/// CIFAR-100 split as a DataFlow: datapoints {image f32 [32, 32, 3] HWC (RGB)
/// in 0..255, label i64 scalar}, the label fine (100 classes) or coarse (20)
/// per `label_mode`. "train" reads train.bin (50000 images), "test" test.bin
/// (10000), from `dir` or from `dir`/cifar-100-binary (the extracted
/// binary-version archive).
class Cifar100 : public DataFromList {
 public:
  Cifar100(const std::string& train_or_test, const std::string& dir,
           Cifar100Label label_mode = Cifar100Label::kFine, bool shuffle = true,
           uint64_t seed = 0);
  std::string name() const override { return "Cifar100"; }
};

}  // namespace spire
