// Implementation of the MNIST IDX and CIFAR-10/100 binary readers declared in
// train/datasets.h (zlib reads the gzip-compressed files).
#include "train/datasets.h"

#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

namespace spire {
namespace {

struct RawFile {
  std::vector<uint8_t> bytes;
  bool gzip = false;
  std::string stream_error;  // non-empty when the gzip stream is corrupt or truncated
};

std::string hex32(uint32_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << std::setw(8) << std::setfill('0') << v;
  return os.str();
}

bool file_exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

RawFile read_raw(const std::string& path) {
  RawFile out;
  unsigned char magic[2] = {0, 0};
  {
    std::ifstream f(path, std::ios::binary);
    SPIRE_CHECK(static_cast<bool>(f), "cannot open ", path, ": ", std::strerror(errno));
    f.read(reinterpret_cast<char*>(magic), 2);
    out.gzip = f.gcount() == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
  }
  if (!out.gzip) {
    std::ifstream f(path, std::ios::binary | std::ios::ate);
    SPIRE_CHECK(static_cast<bool>(f), "cannot open ", path, ": ", std::strerror(errno));
    const std::streamoff n = f.tellg();
    SPIRE_CHECK(n >= 0, "cannot determine the size of ", path);
    out.bytes.resize(static_cast<size_t>(n));
    f.seekg(0);
    if (n > 0) f.read(reinterpret_cast<char*>(out.bytes.data()), n);
    SPIRE_CHECK(f.gcount() == n, "error reading ", path, ": read ", f.gcount(), " of ", n,
                " bytes");
    return out;
  }
  gzFile gz = gzopen(path.c_str(), "rb");
  SPIRE_CHECK(gz != nullptr, "cannot open ", path, ": ", std::strerror(errno));
  gzbuffer(gz, 1 << 17);
  const size_t chunk = 1 << 20;
  for (;;) {
    size_t old = out.bytes.size();
    out.bytes.resize(old + chunk);
    int got = gzread(gz, out.bytes.data() + old, static_cast<unsigned>(chunk));
    if (got < 0) {
      out.bytes.resize(old);
      int errnum = 0;
      const char* msg = gzerror(gz, &errnum);
      out.stream_error = msg ? msg : "read error";
      break;
    }
    out.bytes.resize(old + static_cast<size_t>(got));
    if (got == 0) break;
  }
  int errnum = Z_OK;
  const char* msg = gzerror(gz, &errnum);
  if (out.stream_error.empty() && errnum != Z_OK && errnum != Z_STREAM_END) {
    out.stream_error = msg ? msg : "gzip error";
  }
  int rc = gzclose(gz);
  if (out.stream_error.empty() && rc != Z_OK) {
    out.stream_error = rc == Z_BUF_ERROR ? "unexpected end of file" : "gzip error on close";
  }
  return out;
}

uint32_t be32(const std::vector<uint8_t>& b, size_t off) {
  return (uint32_t{b[off]} << 24) | (uint32_t{b[off + 1]} << 16) | (uint32_t{b[off + 2]} << 8) |
         uint32_t{b[off + 3]};
}

std::string describe(const RawFile& f) {
  return f.gzip ? " (after gzip decompression)" : "";
}

std::string stream_note(const RawFile& f) {
  return f.stream_error.empty() ? "" : str_cat("; the gzip stream is corrupt or truncated: ",
                                               f.stream_error);
}

// Checks the decompressed size against `expected` and the gzip stream state.
void check_size(const std::string& path, const RawFile& f, uint64_t expected,
                const std::string& layout) {
  const uint64_t actual = f.bytes.size();
  if (actual < expected) {
    throw_error(path, ": truncated file: expected ", expected, " bytes (", layout, "), got ",
                actual, describe(f), stream_note(f));
  }
  if (actual > expected) {
    throw_error(path, ": file too long: expected ", expected, " bytes (", layout, "), got ",
                actual, describe(f), stream_note(f));
  }
  SPIRE_CHECK(f.stream_error.empty(), path, ": corrupt or truncated gzip stream: ",
              f.stream_error);
}

void check_header(const std::string& path, const RawFile& f, size_t header, const char* what) {
  if (f.bytes.size() < header) {
    throw_error(path, ": truncated file: expected at least ", header, " bytes for the IDX ", what,
                " header, got ", f.bytes.size(), describe(f), stream_note(f));
  }
}

std::string find_file(const std::string& dir, const std::string& base, const char* who,
                      bool try_plain) {
  const std::string gz = dir + "/" + base + (try_plain ? ".gz" : "");
  if (file_exists(gz)) return gz;
  if (try_plain) {
    const std::string plain = dir + "/" + base;
    if (file_exists(plain)) return plain;
    throw_error(who, ": cannot find ", base, ".gz (or uncompressed ", base, ") in ", dir);
  }
  throw_error(who, ": cannot find ", base, " in ", dir);
}

std::string check_split(const std::string& train_or_test, const char* who) {
  SPIRE_CHECK(train_or_test == "train" || train_or_test == "test", who,
              ": train_or_test must be \"train\" or \"test\", got \"", train_or_test, "\"");
  return train_or_test;
}

}  // namespace

std::vector<uint8_t> read_maybe_gzip_file(const std::string& path) {
  RawFile f = read_raw(path);
  SPIRE_CHECK(f.stream_error.empty(), path, ": corrupt or truncated gzip stream: ",
              f.stream_error, " (", f.bytes.size(), " bytes decompressed)");
  return std::move(f.bytes);
}

ImageLabelData load_mnist_idx(const std::string& images_path, const std::string& labels_path) {
  ImageLabelData out;
  int64_t n_images = 0;
  {
    RawFile f = read_raw(images_path);
    check_header(images_path, f, 4, "image");
    const uint32_t magic = be32(f.bytes, 0);
    SPIRE_CHECK(magic == 0x00000803, images_path, ": bad magic number ", hex32(magic),
                ", expected 0x00000803 (IDX uint8 images with 3 dimensions)", stream_note(f));
    check_header(images_path, f, 16, "image");
    const uint32_t count = be32(f.bytes, 4), rows = be32(f.bytes, 8), cols = be32(f.bytes, 12);
    SPIRE_CHECK(rows > 0 && cols > 0 && rows <= 65536 && cols <= 65536, images_path,
                ": bad image dimensions ", rows, "x", cols);
    const uint64_t per = uint64_t{rows} * cols;
    check_size(images_path, f, 16 + uint64_t{count} * per,
               str_cat("16-byte header + ", count, " images of ", rows, "x", cols));
    n_images = count;
    out.images = Tensor(DType::F32, Shape{int64_t{count}, int64_t{rows}, int64_t{cols}});
    float* dst = out.images.data<float>();
    const uint8_t* src = f.bytes.data() + 16;
    const uint64_t total = uint64_t{count} * per;
    for (uint64_t i = 0; i < total; ++i) dst[i] = static_cast<float>(src[i]);
  }
  {
    RawFile f = read_raw(labels_path);
    check_header(labels_path, f, 4, "label");
    const uint32_t magic = be32(f.bytes, 0);
    SPIRE_CHECK(magic == 0x00000801, labels_path, ": bad magic number ", hex32(magic),
                ", expected 0x00000801 (IDX uint8 labels with 1 dimension)", stream_note(f));
    check_header(labels_path, f, 8, "label");
    const uint32_t count = be32(f.bytes, 4);
    check_size(labels_path, f, 8 + uint64_t{count}, str_cat("8-byte header + ", count, " labels"));
    SPIRE_CHECK(int64_t{count} == n_images, "count mismatch: ", images_path, " holds ", n_images,
                " images but ", labels_path, " holds ", count, " labels");
    out.labels = Tensor(DType::I64, Shape{int64_t{count}});
    int64_t* dst = out.labels.data<int64_t>();
    for (uint32_t i = 0; i < count; ++i) dst[i] = f.bytes[8 + i];
  }
  return out;
}

namespace {

// The CIFAR binary record layout shared by CIFAR-10 and CIFAR-100: `label_bytes`
// label bytes (CIFAR-10: the class; CIFAR-100: coarse, fine), then 3072 pixel
// bytes, channel-major R, G, B planes of 32x32. `label_index` picks the label
// byte that becomes the label, which must be below `num_classes`.
struct CifarLayout {
  const char* dataset;     // "CIFAR-10", "CIFAR-100"
  uint64_t label_bytes;    // 1 or 2
  uint64_t label_index;    // which label byte is the label
  int num_classes;         // 10, 100 or 20
  const char* label_desc;  // "1 label byte", "2 label bytes (coarse, fine)"
  const char* label_name;  // "label", "fine label", "coarse label"
};

ImageLabelData load_cifar_records(const std::vector<std::string>& paths, const CifarLayout& layout,
                                  const char* who) {
  constexpr uint64_t kPixels = 3072, kSide = 32;
  const uint64_t record = layout.label_bytes + kPixels;
  SPIRE_CHECK(!paths.empty(), who, ": no files given");
  std::vector<RawFile> files;
  int64_t n = 0;
  for (const std::string& p : paths) {
    RawFile f = read_raw(p);
    SPIRE_CHECK(f.stream_error.empty(), p, ": corrupt or truncated gzip stream: ", f.stream_error);
    const uint64_t size = f.bytes.size();
    SPIRE_CHECK(size > 0, p, ": empty file, expected ", layout.dataset, " records of ", record,
                " bytes");
    SPIRE_CHECK(size % record == 0, p, ": size ", size, " bytes is not a multiple of ", record,
                " (", layout.label_desc, " + 3072 pixel bytes per ", layout.dataset,
                " record); truncated or not a ", layout.dataset, " binary batch (", size / record,
                " whole records + ", size % record, " bytes)");
    n += static_cast<int64_t>(size / record);
    files.push_back(std::move(f));
  }
  ImageLabelData out;
  out.images = Tensor(DType::F32, Shape{n, 32, 32, 3});
  out.labels = Tensor(DType::I64, Shape{n});
  float* img = out.images.data<float>();
  int64_t* lab = out.labels.data<int64_t>();
  int64_t i = 0;
  for (size_t fi = 0; fi < files.size(); ++fi) {
    const std::vector<uint8_t>& b = files[fi].bytes;
    const uint64_t records = b.size() / record;
    for (uint64_t r = 0; r < records; ++r, ++i) {
      const uint8_t* rec = b.data() + r * record;
      const int label = rec[layout.label_index];
      SPIRE_CHECK(label < layout.num_classes, paths[fi], ": record ", r, " has ",
                  layout.label_name, " ", label, ", expected 0..", layout.num_classes - 1,
                  " (not a ", layout.dataset, " binary batch?)");
      lab[i] = label;
      const uint8_t* px = rec + layout.label_bytes;
      float* dst = img + static_cast<uint64_t>(i) * kPixels;
      for (uint64_t c = 0; c < 3; ++c)
        for (uint64_t y = 0; y < kSide; ++y)
          for (uint64_t x = 0; x < kSide; ++x)
            dst[(y * kSide + x) * 3 + c] = static_cast<float>(px[c * kSide * kSide + y * kSide + x]);
    }
  }
  return out;
}

}  // namespace

ImageLabelData load_cifar10_bin(const std::vector<std::string>& paths) {
  static const CifarLayout kLayout{"CIFAR-10", 1, 0, 10, "1 label byte", "label"};
  return load_cifar_records(paths, kLayout, "load_cifar10_bin");
}

ImageLabelData load_cifar100_bin(const std::vector<std::string>& paths, Cifar100Label label_mode) {
  static const CifarLayout kFine{"CIFAR-100", 2, 1, 100, "2 label bytes (coarse, fine)",
                                 "fine label"};
  static const CifarLayout kCoarse{"CIFAR-100", 2, 0, 20, "2 label bytes (coarse, fine)",
                                   "coarse label"};
  return load_cifar_records(paths, label_mode == Cifar100Label::kCoarse ? kCoarse : kFine,
                            "load_cifar100_bin");
}

std::vector<Datapoint> image_label_datapoints(const ImageLabelData& data) {
  SPIRE_CHECK(data.images.defined() && data.labels.defined() && data.images.rank() >= 1 &&
                  data.labels.rank() == 1 && data.images.dim(0) == data.labels.dim(0),
              "image_label_datapoints: images ", data.images.type_string(), " and labels ",
              data.labels.type_string(), " must have the same first dimension");
  const int64_t n = data.labels.dim(0);
  std::vector<int64_t> item_dims(data.images.shape().dims().begin() + 1,
                                 data.images.shape().dims().end());
  const Shape item_shape(item_dims);
  const size_t item_bytes = n > 0 ? data.images.nbytes() / static_cast<size_t>(n) : 0;
  const char* src = static_cast<const char*>(data.images.raw_data());
  const std::vector<int64_t> labels = data.labels.to_vector<int64_t>();
  std::vector<Datapoint> out;
  out.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    Tensor im(data.images.dtype(), item_shape);
    if (item_bytes > 0) std::memcpy(im.raw_data(), src + static_cast<size_t>(i) * item_bytes, item_bytes);
    out.push_back({std::move(im), Tensor::scalar<int64_t>(labels[static_cast<size_t>(i)])});
  }
  return out;
}

namespace {

std::vector<Datapoint> load_mnist_split(const std::string& train_or_test, const std::string& dir) {
  const std::string prefix = check_split(train_or_test, "Mnist") == "train" ? "train" : "t10k";
  const std::string images = find_file(dir, prefix + "-images-idx3-ubyte", "Mnist", true);
  const std::string labels = find_file(dir, prefix + "-labels-idx1-ubyte", "Mnist", true);
  return image_label_datapoints(load_mnist_idx(images, labels));
}

// Finds `names` in `dir`, or in `dir`/`subdir` (the extracted archive's folder).
std::vector<std::string> find_cifar_files(const std::string& dir, const std::string& subdir,
                                          const std::vector<std::string>& names, const char* who) {
  std::string base = dir;
  if (!file_exists(dir + "/" + names[0]) && file_exists(dir + "/" + subdir + "/" + names[0]))
    base = dir + "/" + subdir;
  std::vector<std::string> paths;
  for (const std::string& nm : names) paths.push_back(find_file(base, nm, who, false));
  return paths;
}

std::vector<Datapoint> load_cifar_split(const std::string& train_or_test, const std::string& dir) {
  std::vector<std::string> names;
  if (check_split(train_or_test, "Cifar10") == "train") {
    for (int i = 1; i <= 5; ++i) names.push_back(str_cat("data_batch_", i, ".bin"));
  } else {
    names.push_back("test_batch.bin");
  }
  return image_label_datapoints(
      load_cifar10_bin(find_cifar_files(dir, "cifar-10-batches-bin", names, "Cifar10")));
}

std::vector<Datapoint> load_cifar100_split(const std::string& train_or_test, const std::string& dir,
                                           Cifar100Label label_mode) {
  const std::string name = check_split(train_or_test, "Cifar100") + ".bin";
  return image_label_datapoints(
      load_cifar100_bin(find_cifar_files(dir, "cifar-100-binary", {name}, "Cifar100"), label_mode));
}

}  // namespace

Mnist::Mnist(const std::string& train_or_test, const std::string& dir, bool shuffle,
             uint64_t seed)
    : DataFromList(load_mnist_split(train_or_test, dir), shuffle, seed) {}

Cifar10::Cifar10(const std::string& train_or_test, const std::string& dir, bool shuffle,
                 uint64_t seed)
    : DataFromList(load_cifar_split(train_or_test, dir), shuffle, seed) {}

Cifar100::Cifar100(const std::string& train_or_test, const std::string& dir,
                   Cifar100Label label_mode, bool shuffle, uint64_t seed)
    : DataFromList(load_cifar100_split(train_or_test, dir, label_mode), shuffle, seed) {}

}  // namespace spire
