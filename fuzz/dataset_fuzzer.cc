// libFuzzer target: the dataset readers. The first byte picks the reader:
// even: MNIST IDX (the rest is split into an image file and a label file at
// the position given by the next two bytes; gzip or plain), 1 mod 4: CIFAR-10
// binary batch, 3 mod 4: CIFAR-100 binary file (fine labels, or coarse when
// bit 2 is set).
#include "fuzz/fuzz_util.h"
#include "train/datasets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  try {
    if (data[0] % 2 == 0) {
      const size_t rest = size - 3;
      const size_t split = rest == 0 ? 0 : (static_cast<size_t>(data[1]) << 8 | data[2]) % (rest + 1);
      const std::string images = spire::fuzz::write_file("images.idx", data + 3, split);
      const std::string labels = spire::fuzz::write_file("labels.idx", data + 3 + split, rest - split);
      spire::ImageLabelData d = spire::load_mnist_idx(images, labels);
      (void)spire::image_label_datapoints(d);
    } else if (data[0] % 4 == 1) {
      const std::string batch = spire::fuzz::write_file("data_batch.bin", data + 1, size - 1);
      spire::ImageLabelData d = spire::load_cifar10_bin({batch});
      (void)spire::image_label_datapoints(d);
    } else {
      const std::string file = spire::fuzz::write_file("train.bin", data + 1, size - 1);
      spire::ImageLabelData d = spire::load_cifar100_bin(
          {file}, data[0] & 4 ? spire::Cifar100Label::kCoarse : spire::Cifar100Label::kFine);
      (void)spire::image_label_datapoints(d);
    }
  } catch (const spire::Error&) {
  }
  return 0;
}
