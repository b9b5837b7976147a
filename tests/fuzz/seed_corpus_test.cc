// Writes the seed corpora of the libFuzzer targets (fuzz/): valid inputs
// made by Spire's own writers, each checked to be accepted by its reader,
// under <build>/fuzz_corpus/<target>/ (scripts/fuzz.sh starts from them).
#include <zlib.h>

#include <filesystem>
#include <fstream>

#include "tests/support/image_writer.h"
#include "tests/support/op_test_util.h"
#include "tests/support/temp_dir.h"
#include "train/checkpoint.h"
#include "train/datasets.h"
#include "train/image_io.h"

namespace spire::testing {
namespace {

namespace fs = std::filesystem;

std::string corpus(const std::string& target) {
  fs::path dir = fs::path(SPIRE_FUZZ_CORPUS_DIR) / target;
  fs::create_directories(dir);
  return dir.string();
}

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

std::string be32(uint32_t v) {
  return std::string{static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
                     static_cast<char>(v)};
}

std::string gzip(const std::string& plain) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 6, Z_DEFLATED, 16 + 15, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(compressBound(static_cast<uLong>(plain.size())) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(plain.data()));
  z.avail_in = static_cast<uInt>(plain.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

TEST(FuzzSeeds, WriteSeedCorpora) {
  TempDir tmp;
  // graph_json: graphs with every attribute type, devices, control inputs and a collective.
  {
    Graph g;
    DefaultGraphGuard guard(g);
    g.set_seed(3);
    Output x = ops::placeholder(DType::F32, {-1, 3}, "x");
    Output w = ops::variable({3, 2}, DType::F32, "w");
    Output init = ops::assign(w, ops::constant(Tensor::from_vector<float>({3, 2}, {1, 2, 3, 4, 5, 6})));
    Output y = ops::softmax(ops::matmul(x, w));
    Output s = ops::sum(y, {1}, true);
    std::vector<Output> parts;
    for (int k = 0; k < 2; ++k) {
      DeviceScope d(g, Device::cpu(k));
      parts.push_back(ops::tanh(s));
    }
    dist::all_reduce(parts, dist::ReduceOp::kMean);
    ops::group({init.node, s.node}, "everything");
    ops::slice(x, {0, 1}, {-1, 2});
    write_bytes(corpus("graph_json") + "/model.json", g.to_json());
    Graph tiny;
    ops::scalar(2.5, DType::F64, &tiny);
    write_bytes(corpus("graph_json") + "/tiny.json", tiny.to_json());
    for (const char* name : {"model.json", "tiny.json"})
      EXPECT_NO_THROW(Graph::from_json(read_bytes(corpus("graph_json") + "/" + name)));
  }
  // safetensors: several dtypes, an empty tensor, metadata.
  {
    std::map<std::string, Tensor> tensors{
        {"a/W", Tensor::from_vector<float>({2, 2}, {1, -2, 3.5f, 0})},
        {"b", Tensor::from_vector<double>({3}, {1e-300, 2, -7})},
        {"step", Tensor::scalar<int64_t>(1200)},
        {"i", Tensor::from_vector<int32_t>({1, 2}, {-5, 9})},
        {"empty", Tensor::zeros(DType::F32, {0, 4})},
        {"mask", Tensor::from_vector<bool>({3}, {true, false, true})}};
    save_checkpoint(tmp.path() + "/m.safetensors", tensors, {{"note", "seed"}});
    save_checkpoint(tmp.path() + "/one.safetensors", {{"x", Tensor::scalar<float>(1)}});
    for (const char* name : {"m.safetensors", "one.safetensors"}) {
      EXPECT_NO_THROW(read_checkpoint(tmp.path() + "/" + name));
      write_bytes(corpus("safetensors") + "/" + name, read_bytes(tmp.path() + "/" + name));
    }
  }
  // checkpoint_index
  {
    CheckpointIndex index;
    index.latest = "model-1200.safetensors";
    index.all = {"model-1000.safetensors", "model-1200.safetensors"};
    write_checkpoint_index(tmp.path(), index);
    EXPECT_TRUE(read_checkpoint_index(tmp.path()).has_value());
    write_bytes(corpus("checkpoint_index") + "/checkpoint", read_bytes(tmp.path() + "/" + kCheckpointIndexName));
  }
  // dataset: [even byte][2-byte split][IDX images][IDX labels] (plain and gzip), [1][CIFAR-10
  // batch], [3][CIFAR-100 file].
  {
    const uint32_t n = 3, rows = 4, cols = 5;
    std::string images = be32(0x00000803) + be32(n) + be32(rows) + be32(cols);
    for (uint32_t i = 0; i < n * rows * cols; ++i) images += static_cast<char>(i * 7);
    std::string labels = be32(0x00000801) + be32(n) + std::string{1, 7, 9};
    auto framed = [](const std::string& a, const std::string& b) {
      return std::string{0, static_cast<char>(a.size() >> 8), static_cast<char>(a.size() & 255)} + a + b;
    };
    write_bytes(corpus("dataset") + "/mnist_plain", framed(images, labels));
    write_bytes(corpus("dataset") + "/mnist_gzip", framed(gzip(images), gzip(labels)));
    write_bytes(tmp.path() + "/i", images);
    write_bytes(tmp.path() + "/l", gzip(labels));
    EXPECT_EQ(load_mnist_idx(tmp.path() + "/i", tmp.path() + "/l").labels.num_elements(), 3);
    std::string cifar;
    for (int r = 0; r < 2; ++r) {
      cifar += static_cast<char>(r + 3);
      for (int p = 0; p < 3072; ++p) cifar += static_cast<char>(p * r);
    }
    write_bytes(corpus("dataset") + "/cifar", std::string(1, 1) + cifar);
    write_bytes(tmp.path() + "/c", cifar);
    EXPECT_EQ(load_cifar10_bin({tmp.path() + "/c"}).labels.num_elements(), 2);
    std::string cifar100;
    for (int r = 0; r < 2; ++r) {
      cifar100 += static_cast<char>(r + 3);
      cifar100 += static_cast<char>(r + 40);
      for (int p = 0; p < 3072; ++p) cifar100 += static_cast<char>(p * (r + 1));
    }
    write_bytes(corpus("dataset") + "/cifar100", std::string(1, 3) + cifar100);
    write_bytes(tmp.path() + "/c100", cifar100);
    EXPECT_EQ(load_cifar100_bin({tmp.path() + "/c100"}).labels.to_vector<int64_t>(),
              (std::vector<int64_t>{40, 41}));
  }
  // image: [options byte][a JPEG or PNG]: JPEGs gray, RGB (progressive-free, 4:2:0) and CMYK;
  // PNGs RGB, interlaced RGBA, 16-bit gray, palette.
  {
    std::vector<uint8_t> rgb, gray, cmyk;
    for (int i = 0; i < 20 * 12; ++i) {
      rgb.insert(rgb.end(), {static_cast<uint8_t>(i), static_cast<uint8_t>(3 * i), static_cast<uint8_t>(250 - i)});
      gray.push_back(static_cast<uint8_t>(i * 5));
      cmyk.insert(cmyk.end(), {static_cast<uint8_t>(i), 40, static_cast<uint8_t>(2 * i), 200});
    }
    PngSpec rgba;
    rgba.width = 5;
    rgba.height = 7;
    rgba.color = PngColor::kRGBA;
    rgba.interlaced = true;
    for (int i = 0; i < 5 * 7 * 4; ++i) rgba.samples.push_back(static_cast<uint16_t>(i * 9 % 256));
    PngSpec gray16;
    gray16.width = 4;
    gray16.height = 3;
    gray16.color = PngColor::kGray;
    gray16.bit_depth = 16;
    for (int i = 0; i < 12; ++i) gray16.samples.push_back(static_cast<uint16_t>(i * 5000));
    PngSpec pal;
    pal.width = 3;
    pal.height = 2;
    pal.color = PngColor::kPalette;
    pal.palette = {255, 0, 0, 0, 255, 0};
    pal.samples = {0, 1, 1, 0, 0, 1};
    PngSpec plain = rgba;
    plain.color = PngColor::kRGB;
    plain.interlaced = false;
    plain.samples.resize(5 * 7 * 3);
    const std::vector<std::pair<std::string, ImageBytes>> images = {
        {"rgb.jpg", encode_jpeg(20, 12, 3, rgb, 80)},  {"gray.jpg", encode_jpeg(20, 12, 1, gray, 90)},
        {"cmyk.jpg", encode_jpeg(20, 12, 4, cmyk, 90)}, {"rgb.png", encode_png(plain)},
        {"rgba_interlaced.png", encode_png(rgba)},     {"gray16.png", encode_png(gray16)},
        {"palette.png", encode_png(pal)}};
    for (const auto& [name, bytes] : images) {
      EXPECT_NO_THROW(decode_image(bytes.data(), bytes.size(), name)) << name;
      std::string framed(1, '\x04');  // BGR, 2^18-pixel limit
      framed.append(bytes.begin(), bytes.end());
      write_bytes(corpus("image") + "/" + name, framed);
    }
  }
}

}  // namespace
}  // namespace spire::testing
