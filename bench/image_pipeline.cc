// Images/s of the ResNet example's training input pipelines alone, without training:
// the pipelines of examples/resnet/resnet_data.h exactly as examples/resnet builds them,
// measured with TestDataSpeed (train/dataflow_speed.h). bench/pipeline_vs_step.sh prints
// the figures beside the trainer's images/s (build/bench/resnet_step).
//
//   imagenet  ILSVRC12Files -> MultiThreadMapData(JPEG decode + fbresnet_augmentor on
//             --data-threads threads) -> BatchData, on an ImageNet-style folder of
//             synthetic JPEGs this program writes first (train/<wnid>/*.JPEG, --classes
//             folders, --files in all; ImageNet-like sizes around 500x375, landscape and
//             portrait, and content: smooth shading, shapes and sensor-like noise, quality
//             90, so that the files are about ImageNet's average size, ~110 KiB)
//   cifar10   Cifar10 -> AugmentImageComponent(cifar_augmentor) -> BatchData, on
//             synthetic CIFAR-10 binaries (data_batch_1..5.bin, --files records in all);
//             the augmentation runs in the thread that pulls the batches (one thread)
//
// The files are written once, to a fresh temporary folder removed at the end (or to
// --dir, kept), and are in the page cache when read: this measures decoding and
// augmenting, not the disk. With --prefetch N the pipeline is wrapped in a PrefetchData
// of N batches (one thread), as the trainer's QueueInput wraps it. Each configuration
// pulls --warmup batches untimed, then --batches batches timed, and prints one line:
//
//   RESULT pipeline=P data_threads=T batch=B prefetch=N batches=K images=I seconds=X
//          images_per_s=X cpu_ms_per_image=X files=F mean_file_kib=X mean_pixels=WxH
//
// (one line; cpu_ms_per_image is the process's CPU time, all threads, per timed image).
//
//   build/bench/image_pipeline --pipeline imagenet --batch 32 --data-threads 1,2
//   build/bench/image_pipeline --pipeline cifar10 --batch 128 --batches 40
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "examples/resnet/resnet_data.h"
#include "bench/bench_util.h"
#include "spire.h"
#include "tests/support/image_writer.h"
#include "tests/support/temp_dir.h"

using namespace spire;
using namespace spire_examples;

namespace {

struct Options {
  ResNetDataset pipeline = ResNetDataset::kImagenet;
  int64_t batch = 0;                 // 0: 32 for imagenet, 128 for cifar10
  std::vector<int> data_threads{1, 2};  // imagenet only
  int64_t batches = 0;               // timed; 0: 8 for imagenet, 40 for cifar10
  int64_t warmup = 1;                // untimed batches
  int64_t prefetch = 0;              // PrefetchData buffer (batches); 0: none
  int64_t files = 0;                 // 0: 160 JPEGs for imagenet, 5120 records for cifar10
  int classes = 4;
  std::string dir;                   // empty: a temporary folder
};

const char* kUsage =
    "usage: image_pipeline [--pipeline imagenet|cifar10] [--batch B] [--data-threads LIST]\n"
    "                      [--batches K] [--warmup W] [--prefetch N] [--files F] [--classes C]\n"
    "                      [--dir DIR]\n"
    "Images/s of the ResNet example's training input pipeline alone (examples/resnet/\n"
    "resnet_data.h) on synthetic files it writes first: imagenet (JPEG decode +\n"
    "fbresnet_augmentor on each of --data-threads (default 1,2) threads, batch 32) or\n"
    "cifar10 (cifar_augmentor, batch 128). Ends each configuration with a RESULT line.\n";

long parse_int(const std::string& flag, const std::string& v, long lo, long hi) {
  return spire::bench::parse_int_flag("", flag, v, lo, hi);
}

// Returns false when --help was asked for.
bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("%s", kUsage);
      return false;
    }
    if (i + 1 >= argc) throw_error("'", a, "' needs a value (see --help)");
    const std::string v = argv[++i];
    if (a == "--pipeline") {
      if (v != "imagenet" && v != "cifar10")
        throw_error("--pipeline is imagenet or cifar10, got '", v, "'");
      o.pipeline = parse_resnet_dataset(v);
    } else if (a == "--batch") {
      o.batch = parse_int(a, v, 1, 1 << 16);
    } else if (a == "--data-threads") {
      o.data_threads.clear();
      size_t start = 0;
      while (start <= v.size()) {
        const size_t comma = std::min(v.find(',', start), v.size());
        o.data_threads.push_back(static_cast<int>(parse_int(a, v.substr(start, comma - start), 1, 256)));
        start = comma + 1;
      }
    } else if (a == "--batches") {
      o.batches = parse_int(a, v, 1, 1 << 24);
    } else if (a == "--warmup") {
      o.warmup = parse_int(a, v, 0, 1 << 24);
    } else if (a == "--prefetch") {
      o.prefetch = parse_int(a, v, 0, 1 << 16);
    } else if (a == "--files") {
      o.files = parse_int(a, v, 1, 1 << 24);
    } else if (a == "--classes") {
      o.classes = static_cast<int>(parse_int(a, v, 1, 1000));
    } else if (a == "--dir") {
      o.dir = v;
    } else {
      throw_error("unknown argument '", a, "' (see --help)");
    }
  }
  const bool imagenet = o.pipeline == ResNetDataset::kImagenet;
  if (o.batch == 0) o.batch = imagenet ? 32 : 128;
  if (o.batches == 0) o.batches = imagenet ? 8 : 40;
  if (o.files == 0) o.files = imagenet ? 160 : 5120;
  if (!imagenet) o.data_threads = {1};
  return true;
}

// ---- synthetic data ---------------------------------------------------------------------

// 8-bit RGB samples of a photo-like w x h image: a smooth shading per channel, a few
// filled ellipses of random colors, and noise, so that JPEG has to code detail.
std::vector<uint8_t> photo_like(int w, int h, int noise, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  float base[3], gx[3], gy[3];
  for (int c = 0; c < 3; ++c) {
    base[c] = 40 + 170 * u(rng);
    gx[c] = (u(rng) - 0.5f) * 120 / static_cast<float>(w);
    gy[c] = (u(rng) - 0.5f) * 120 / static_cast<float>(h);
  }
  struct Ellipse { float cx, cy, rx, ry, color[3]; };
  std::vector<Ellipse> shapes(6);
  for (Ellipse& e : shapes) {
    e = {u(rng) * w, u(rng) * h, (0.05f + 0.25f * u(rng)) * w, (0.05f + 0.25f * u(rng)) * h, {}};
    for (float& c : e.color) c = 255 * u(rng);
  }
  std::uniform_int_distribution<int> jitter(-noise, noise);
  std::vector<uint8_t> px(static_cast<size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      float v[3];
      for (int c = 0; c < 3; ++c) v[c] = base[c] + gx[c] * x + gy[c] * y;
      for (const Ellipse& e : shapes) {
        const float dx = (x - e.cx) / e.rx, dy = (y - e.cy) / e.ry;
        if (dx * dx + dy * dy < 1)
          for (int c = 0; c < 3; ++c) v[c] = 0.3f * v[c] + 0.7f * e.color[c];
      }
      for (int c = 0; c < 3; ++c)
        px[(static_cast<size_t>(y) * w + x) * 3 + c] =
            static_cast<uint8_t>(std::clamp(v[c] + static_cast<float>(jitter(rng)), 0.0f, 255.0f));
    }
  return px;
}

struct WrittenData {
  int64_t files = 0;
  double mean_bytes = 0, mean_w = 0, mean_h = 0;
};

// dir/train/<wnid>/<wnid>_<i>.JPEG: `files` JPEGs over `classes` folders.
WrittenData write_imagenet_folder(const std::string& dir, int64_t files, int classes) {
  // ImageNet's common sizes (landscape 4:3 and 3:2, portrait, square), jittered.
  const int sizes[][2] = {{500, 375}, {500, 333}, {375, 500}, {500, 500}, {400, 300}, {500, 400}, {333, 500}};
  std::mt19937_64 rng(2026);
  std::uniform_int_distribution<int> pick(0, 6), jitter(-24, 24);
  WrittenData w;
  for (int64_t i = 0; i < files; ++i) {
    char wnid[16];
    std::snprintf(wnid, sizeof(wnid), "n%08d", static_cast<int>(i % classes) + 1);
    const std::string folder = dir + "/train/" + wnid;
    if (i < classes) std::filesystem::create_directories(folder);
    const int* s = sizes[pick(rng)];
    const int width = s[0] + jitter(rng), height = s[1] + jitter(rng);
    const std::vector<uint8_t> bytes = spire::testing::encode_jpeg(width, height, 3, photo_like(width, height, 44, rng), 90);
    spire::testing::write_bytes_file(folder + "/" + wnid + "_" + std::to_string(i) + ".JPEG", bytes);
    w.mean_bytes += static_cast<double>(bytes.size());
    w.mean_w += width;
    w.mean_h += height;
  }
  w.files = files;
  w.mean_bytes /= static_cast<double>(files);
  w.mean_w /= static_cast<double>(files);
  w.mean_h /= static_cast<double>(files);
  return w;
}

// dir/data_batch_{1..5}.bin: `records` CIFAR-10 records (label byte, then the R, G, B
// planes of 32x32) spread over the five files.
WrittenData write_cifar10(const std::string& dir, int64_t records) {
  std::mt19937_64 rng(2026);
  std::uniform_int_distribution<int> label(0, 9);
  WrittenData w;
  for (int b = 1; b <= 5; ++b) {
    const int64_t n = records / 5 + (b <= records % 5 ? 1 : 0);
    std::string bytes;
    for (int64_t r = 0; r < n; ++r) {
      bytes.push_back(static_cast<char>(label(rng)));
      const std::vector<uint8_t> px = photo_like(32, 32, 14, rng);
      for (int c = 0; c < 3; ++c)
        for (int p = 0; p < 32 * 32; ++p) bytes.push_back(static_cast<char>(px[static_cast<size_t>(p) * 3 + c]));
    }
    const std::string path = dir + "/data_batch_" + std::to_string(b) + ".bin";
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) throw_error("cannot write ", path);
  }
  w.files = records;
  w.mean_bytes = 3073;
  w.mean_w = w.mean_h = 32;
  return w;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options o;
    if (!parse(argc, argv, o)) return 0;
    const bool imagenet = o.pipeline == ResNetDataset::kImagenet;
    std::unique_ptr<spire::testing::TempDir> tmp;
    std::string dir = o.dir;
    if (dir.empty()) {
      tmp = std::make_unique<spire::testing::TempDir>("spire_image_pipeline");
      dir = tmp->path();
    } else {
      std::filesystem::create_directories(dir);
    }
    const WrittenData data = imagenet ? write_imagenet_folder(dir, o.files, o.classes) : write_cifar10(dir, o.files);
    std::printf("image_pipeline: %s, %lld %s in %s (mean %.1f KiB, %.0fx%.0f), batch %lld, %lld warm-up and %lld "
                "timed batches%s\n",
                resnet_dataset_name(o.pipeline), static_cast<long long>(data.files), imagenet ? "JPEGs" : "records",
                dir.c_str(), data.mean_bytes / 1024, data.mean_w, data.mean_h, static_cast<long long>(o.batch),
                static_cast<long long>(o.warmup), static_cast<long long>(o.batches),
                o.prefetch > 0 ? (", PrefetchData(" + std::to_string(o.prefetch) + ")").c_str() : "");
    std::fflush(stdout);

    const ImageSpec spec = resnet_image_spec(o.pipeline, imagenet);
    for (int threads : o.data_threads) {
      ResNetDataOptions d;
      d.dataset = o.pipeline;
      d.dir = dir;
      d.imagenet = imagenet;
      d.batch = o.batch;
      d.data_threads = threads;
      std::shared_ptr<DataFlow> flow = make_resnet_train_data(d, spec).flow;
      if (o.prefetch > 0) flow = std::make_shared<PrefetchData>(flow, o.prefetch);
      const DataSpeed s = TestDataSpeed(flow, o.batches, o.warmup).start();
      std::printf("RESULT pipeline=%s data_threads=%d batch=%lld prefetch=%lld batches=%lld images=%lld seconds=%.6g "
                  "images_per_s=%.2f cpu_ms_per_image=%.4g files=%lld mean_file_kib=%.1f mean_pixels=%.0fx%.0f\n",
                  resnet_dataset_name(o.pipeline), threads, static_cast<long long>(o.batch),
                  static_cast<long long>(o.prefetch), static_cast<long long>(s.datapoints),
                  static_cast<long long>(s.images), s.seconds, s.images_per_s(),
                  s.images > 0 ? 1e3 * s.cpu_seconds / static_cast<double>(s.images) : 0.0,
                  static_cast<long long>(data.files), data.mean_bytes / 1024, data.mean_w, data.mean_h);
      std::fflush(stdout);
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "image_pipeline: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "image_pipeline: %s\n", e.what());
    return 1;
  }
}
