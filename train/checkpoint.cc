// Safetensors checkpoints with Spire's integrity keys, and the TF-style
// `checkpoint` index of a training directory (see checkpoint.h).
#include "train/checkpoint.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "train/file_util.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint.cc assumes a little-endian host (safetensors data is little-endian)"
#endif

namespace spire {
namespace {

using json = nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;  // 100 MiB
constexpr const char* kMetadataKey = "__metadata__";
constexpr const char* kVersionKey = "spire_format_version";
constexpr const char* kDataCrcKey = "spire_crc32c";
constexpr const char* kHeaderCrcKey = "spire_header_crc32c";
constexpr const char* kReservedPrefix = "spire_";

const char* safetensors_dtype(DType dt) {
  switch (dt) {
    case DType::F32: return "F32";
    case DType::F64: return "F64";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::Bool: return "BOOL";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    default: return nullptr;
  }
}

bool dtype_from_safetensors(const std::string& s, DType* out) {
  static const std::pair<const char*, DType> table[] = {
      {"F32", DType::F32}, {"F64", DType::F64}, {"I32", DType::I32}, {"I64", DType::I64},
      {"BOOL", DType::Bool}, {"F16", DType::F16}, {"BF16", DType::BF16}};
  for (const auto& [name, dt] : table) {
    if (s == name) {
      *out = dt;
      return true;
    }
  }
  return false;
}

bool starts_with(const std::string& s, const char* prefix) {
  return s.compare(0, std::strlen(prefix), prefix) == 0;
}

// Parses the 8-digit lowercase hex CRC written by crc32c_hex (uppercase is
// refused so that a flipped case bit cannot go unnoticed).
bool parse_crc_hex(const std::string& s, uint32_t* out) {
  if (s.size() != 8) return false;
  uint32_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else return false;
    v = (v << 4) | static_cast<uint32_t>(d);
  }
  *out = v;
  return true;
}

// Open file read with pread; closes itself.
class ReadOnlyFile {
 public:
  explicit ReadOnlyFile(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) {
      int err = errno;
      throw_error("load_checkpoint: cannot open '", path, "': ", std::strerror(err));
    }
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd_);
      throw_error("load_checkpoint: '", path, "' is not a regular file");
    }
    size_ = static_cast<uint64_t>(st.st_size);
  }
  ~ReadOnlyFile() { ::close(fd_); }
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;

  uint64_t size() const { return size_; }

  void read_at(uint64_t offset, void* dst, uint64_t n) const {
    char* p = static_cast<char*>(dst);
    while (n > 0) {
      size_t chunk = static_cast<size_t>(std::min<uint64_t>(n, uint64_t{1} << 30));
      ssize_t got = ::pread(fd_, p, chunk, static_cast<off_t>(offset));
      if (got < 0) {
        if (errno == EINTR) continue;
        int err = errno;
        throw_error("load_checkpoint: cannot read '", path_, "': ", std::strerror(err));
      }
      if (got == 0)
        throw_error("load_checkpoint: '", path_, "': file is truncated (ended while reading)");
      p += got;
      offset += static_cast<uint64_t>(got);
      n -= static_cast<uint64_t>(got);
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

// Checked product of the dims; false on overflow of int64.
bool checked_num_elements(const std::vector<int64_t>& dims, int64_t* out) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (__builtin_mul_overflow(n, d, &n)) return false;
  }
  *out = n;
  return true;
}

}  // namespace

void save_checkpoint(const std::string& path, const std::map<std::string, Tensor>& tensors,
                     const std::map<std::string, std::string>& metadata) {
  auto fail = [&](auto&&... args) {
    throw_error("save_checkpoint: '", path, "': ", std::forward<decltype(args)>(args)...);
  };
  json meta = json::object();
  for (const auto& [k, v] : metadata) {
    if (starts_with(k, kReservedPrefix))
      fail("metadata key '", k, "' is reserved (keys starting with 'spire_' are written by Spire)");
    meta[k] = v;
  }

  // CPU copies of the tensors, in name order (the order of the header's keys).
  std::vector<Tensor> host;
  host.reserve(tensors.size());
  json header = json::object();
  uint64_t offset = 0;
  uint32_t data_crc = 0;
  for (const auto& [name, t] : tensors) {
    if (name == kMetadataKey) fail("tensor name '", kMetadataKey, "' is reserved");
    if (name.empty()) fail("empty tensor name");
    if (!t.defined()) fail("tensor '", name, "' is undefined");
    const char* st_dtype = safetensors_dtype(t.dtype());
    if (!st_dtype) fail("tensor '", name, "' has unsupported dtype ", dtype_name(t.dtype()));
    Tensor h = t.to(Device::cpu());
    uint64_t n = h.nbytes();
    json shape = json::array();
    for (int64_t d : h.shape().dims()) shape.push_back(d);
    json entry = json::object();
    entry["dtype"] = st_dtype;
    entry["shape"] = shape;
    entry["data_offsets"] = json::array({offset, offset + n});
    header[name] = std::move(entry);
    if (n) data_crc = crc32c_extend(data_crc, h.raw_data(), n);
    offset += n;
    host.push_back(std::move(h));
  }
  meta[kVersionKey] = std::to_string(kCheckpointFormatVersion);
  meta[kDataCrcKey] = crc32c_hex(data_crc);
  header[kMetadataKey] = meta;

  std::string text;
  try {
    // The header CRC covers the compact dump of everything but itself.
    std::string canonical = header.dump();
    uint32_t header_crc = crc32c(canonical.data(), canonical.size());
    header[kMetadataKey][kHeaderCrcKey] = crc32c_hex(header_crc);
    text = header.dump();
  } catch (const json::exception& e) {
    fail("cannot encode the header (tensor names and metadata must be valid UTF-8): ", e.what());
  }
  // Pad with spaces so the data section starts 8-byte aligned, as the
  // reference implementation does.
  text.append((8 - text.size() % 8) % 8, ' ');
  char len_bytes[8];
  uint64_t len = text.size();
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<char>((len >> (8 * i)) & 0xff);

  std::vector<std::string_view> parts;
  parts.emplace_back(len_bytes, 8);
  parts.emplace_back(text);
  for (const Tensor& h : host)
    if (h.nbytes()) parts.emplace_back(static_cast<const char*>(h.raw_data()), h.nbytes());
  atomic_write_file_parts(path, parts);
}

Checkpoint read_checkpoint(const std::string& path) {
  auto fail = [&](auto&&... args) {
    throw_error("load_checkpoint: '", path, "': ", std::forward<decltype(args)>(args)...);
  };
  ReadOnlyFile file(path);
  const uint64_t file_size = file.size();
  if (file_size < 8)
    fail("file is too short (", file_size, " bytes) to be a safetensors checkpoint (needs an 8-byte header length)");
  unsigned char len_bytes[8];
  file.read_at(0, len_bytes, 8);
  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) header_len |= uint64_t{len_bytes[i]} << (8 * i);
  if (header_len > kMaxHeaderBytes)
    fail("oversized header: header length ", header_len, " bytes exceeds the limit of ",
         kMaxHeaderBytes, " bytes (corrupt file or not a safetensors file)");
  if (header_len > file_size - 8)
    fail("oversized header: header length ", header_len, " bytes exceeds the ", file_size - 8,
         " bytes that follow it (truncated or corrupt file)");
  std::string text(static_cast<size_t>(header_len), '\0');
  file.read_at(8, text.data(), header_len);
  const uint64_t data_begin = 8 + header_len;
  const uint64_t data_len = file_size - data_begin;

  // JSON text never holds a raw NUL (nlohmann's parser would stop there and
  // accept what follows).
  if (text.find('\0') != std::string::npos)
    fail("malformed JSON header (", header_len, " bytes): contains a NUL byte");
  json header = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) fail("malformed JSON header (", header_len, " bytes)");
  if (!header.is_object()) fail("JSON header is not an object");

  Checkpoint out;
  // ---- metadata and Spire's integrity keys ----
  std::optional<uint32_t> data_crc, header_crc;
  if (header.contains(kMetadataKey)) {
    const json& meta = header[kMetadataKey];
    if (!meta.is_object()) fail("__metadata__ is not an object");
    for (const auto& [k, v] : meta.items()) {
      if (!v.is_string()) fail("__metadata__ value of '", k, "' is not a string");
      out.metadata[k] = v.get<std::string>();
    }
    bool any_spire = false;
    for (const auto& [k, v] : out.metadata) any_spire |= starts_with(k, kReservedPrefix);
    if (any_spire) {
      // A Spire file: all integrity keys must be there.
      for (const char* key : {kVersionKey, kDataCrcKey, kHeaderCrcKey})
        if (!out.metadata.count(key)) fail("corrupt header: __metadata__ lacks '", key, "'");
      const std::string& ver = out.metadata[kVersionKey];
      if (ver.empty() || ver.size() > 9 || ver.find_first_not_of("0123456789") != std::string::npos)
        fail("corrupt header: bad ", kVersionKey, " '", ver, "'");
      if (std::stoi(ver) > kCheckpointFormatVersion)
        fail("format version ", ver, " is newer than this Spire supports (",
             kCheckpointFormatVersion, ")");
      uint32_t c;
      if (!parse_crc_hex(out.metadata[kDataCrcKey], &c))
        fail("corrupt header: bad ", kDataCrcKey, " '", out.metadata[kDataCrcKey], "'");
      data_crc = c;
      if (!parse_crc_hex(out.metadata[kHeaderCrcKey], &c))
        fail("corrupt header: bad ", kHeaderCrcKey, " '", out.metadata[kHeaderCrcKey], "'");
      header_crc = c;
    }
  }
  if (header_crc) {
    json canonical = header;
    canonical[kMetadataKey].erase(kHeaderCrcKey);
    std::string dump = canonical.dump();
    uint32_t actual = crc32c(dump.data(), dump.size());
    if (actual != *header_crc)
      fail("header checksum mismatch (stored ", crc32c_hex(*header_crc), ", computed ",
           crc32c_hex(actual), "): the header is corrupt");
  }

  // ---- tensor entries ----
  std::vector<Entry> entries;
  for (const auto& [name, info] : header.items()) {
    if (name == kMetadataKey) continue;
    if (!info.is_object()) fail("entry of tensor '", name, "' is not an object");
    if (!info.contains("dtype") || !info["dtype"].is_string())
      fail("tensor '", name, "': missing or non-string \"dtype\"");
    Entry e;
    e.name = name;
    std::string dt = info["dtype"].get<std::string>();
    if (!dtype_from_safetensors(dt, &e.dtype))
      fail("tensor '", name, "': unknown or unsupported dtype '", dt,
           "' (supported: F32, F64, I32, I64, BOOL, F16, BF16)");
    if (!info.contains("shape") || !info["shape"].is_array())
      fail("tensor '", name, "': missing or non-array \"shape\"");
    std::vector<int64_t> dims;
    for (const json& d : info["shape"]) {
      if (!d.is_number_unsigned() ||
          d.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        fail("tensor '", name, "': shape ", info["shape"].dump(),
             " must hold non-negative integers");
      dims.push_back(static_cast<int64_t>(d.get<uint64_t>()));
    }
    e.shape = Shape(dims);
    const json& offs = info.contains("data_offsets") ? info["data_offsets"] : json();
    if (!offs.is_array() || offs.size() != 2 || !offs[0].is_number_unsigned() ||
        !offs[1].is_number_unsigned())
      fail("tensor '", name, "': \"data_offsets\" must be [begin, end] with non-negative integers");
    e.begin = offs[0].get<uint64_t>();
    e.end = offs[1].get<uint64_t>();
    if (e.end < e.begin)
      fail("tensor '", name, "': data_offsets [", e.begin, ", ", e.end, "] end before they begin");
    int64_t numel;
    uint64_t need = 0;
    if (!checked_num_elements(dims, &numel) ||
        __builtin_mul_overflow(static_cast<uint64_t>(numel), dtype_size(e.dtype), &need))
      fail("tensor '", name, "': shape ", e.shape.to_string(), " is too large");
    if (e.end - e.begin != need)
      fail("tensor '", name, "': data_offsets [", e.begin, ", ", e.end, "] span ",
           e.end - e.begin, " bytes but ", dt, " ", e.shape.to_string(), " needs ", need);
    entries.push_back(std::move(e));
  }

  // The entries must tile the data section exactly: no overlap, no gap.
  std::vector<const Entry*> by_offset;
  for (const Entry& e : entries) by_offset.push_back(&e);
  std::stable_sort(by_offset.begin(), by_offset.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t pos = 0;
  for (const Entry* e : by_offset) {
    if (e->begin < pos)
      fail("data_offsets of tensor '", e->name, "' [", e->begin, ", ", e->end,
           "] overlap the previous tensor (which ends at ", pos, ")");
    if (e->begin > pos)
      fail("gap in the data section: bytes [", pos, ", ", e->begin,
           ") belong to no tensor (before tensor '", e->name, "')");
    pos = e->end;
  }
  if (pos > data_len)
    fail("file is truncated: the header describes ", pos, " data bytes but only ", data_len,
         " follow the header");
  if (pos < data_len)
    fail("data section length mismatch: ", data_len, " bytes follow the header but the tensors cover ",
         pos, " (trailing bytes)");

  // ---- data ----
  uint32_t crc = 0;
  for (const Entry* e : by_offset) {
    Tensor t(e->dtype, e->shape);
    uint64_t n = e->end - e->begin;
    if (n) {
      file.read_at(data_begin + e->begin, t.raw_data(), n);
      crc = crc32c_extend(crc, t.raw_data(), n);
    }
    out.tensors[e->name] = std::move(t);
  }
  if (data_crc && crc != *data_crc)
    fail("data checksum mismatch (stored ", crc32c_hex(*data_crc), ", computed ", crc32c_hex(crc),
         "): the tensor data is corrupt");
  // bool bytes other than 0/1 are not valid bools (and undefined behaviour
  // to read as C++ bool).
  for (const auto& [name, t] : out.tensors) {
    if (t.dtype() != DType::Bool) continue;
    const unsigned char* p = static_cast<const unsigned char*>(t.raw_data());
    for (int64_t i = 0; i < t.num_elements(); ++i)
      if (p[i] > 1)
        fail("BOOL tensor '", name, "' holds byte value ", int(p[i]), " at element ", i,
             " (expected 0 or 1)");
  }
  return out;
}

std::map<std::string, Tensor> load_checkpoint(const std::string& path) {
  return read_checkpoint(path).tensors;
}

// ---- the index file ---------------------------------------------------------

namespace {

bool is_plain_file_name(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos &&
         s.find('\0') == std::string::npos;
}

}  // namespace

std::optional<CheckpointIndex> read_checkpoint_index(const std::string& dir) {
  std::string path = join_path(dir, kCheckpointIndexName);
  if (!path_exists(path)) return std::nullopt;
  std::string text = read_file(path);
  auto fail = [&](auto&&... args) {
    throw_error("checkpoint index '", path, "' is corrupt: ", std::forward<decltype(args)>(args)...);
  };
  json j = text.find('\0') != std::string::npos
               ? json(json::value_t::discarded)
               : json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) fail("malformed JSON");
  if (!j.is_object()) fail("not a JSON object");
  if (!j.contains("latest") || !j["latest"].is_string()) fail("missing or non-string \"latest\"");
  if (!j.contains("all") || !j["all"].is_array()) fail("missing or non-array \"all\"");
  CheckpointIndex index;
  index.latest = j["latest"].get<std::string>();
  for (const json& v : j["all"]) {
    if (!v.is_string()) fail("\"all\" holds a non-string entry ", v.dump());
    index.all.push_back(v.get<std::string>());
    if (!is_plain_file_name(index.all.back()))
      fail("entry '", index.all.back(), "' is not a plain file name");
  }
  if (!index.latest.empty() && !is_plain_file_name(index.latest))
    fail("\"latest\" '", index.latest, "' is not a plain file name");
  return index;
}

void write_checkpoint_index(const std::string& dir, const CheckpointIndex& index) {
  std::string path = join_path(dir, kCheckpointIndexName);
  for (const std::string& name : index.all)
    SPIRE_CHECK(is_plain_file_name(name), "write_checkpoint_index: '", path, "': entry '", name,
                "' is not a plain file name");
  SPIRE_CHECK(index.latest.empty() || is_plain_file_name(index.latest),
              "write_checkpoint_index: '", path, "': latest '", index.latest,
              "' is not a plain file name");
  std::string text;
  try {
    text = json{{"latest", index.latest}, {"all", index.all}}.dump(2) + "\n";
  } catch (const json::exception& e) {
    throw_error("write_checkpoint_index: '", path, "': ", e.what());
  }
  atomic_write_file(path, text);
}

std::string save_checkpoint_in_dir(const std::string& dir, const std::string& prefix,
                                   int64_t step, const std::map<std::string, Tensor>& tensors,
                                   int max_to_keep,
                                   const std::map<std::string, std::string>& metadata) {
  SPIRE_CHECK(is_plain_file_name(prefix), "save_checkpoint_in_dir: prefix '", prefix,
              "' must be a non-empty file name without '/'");
  make_dirs(dir);
  // Read (and validate) the index before writing anything.
  CheckpointIndex index = read_checkpoint_index(dir).value_or(CheckpointIndex{});
  std::string name = str_cat(prefix, "-", step, ".safetensors");
  std::string path = join_path(dir, name);
  save_checkpoint(path, tensors, metadata);

  index.all.erase(std::remove(index.all.begin(), index.all.end(), name), index.all.end());
  index.all.push_back(name);
  index.latest = name;
  std::vector<std::string> doomed;
  if (max_to_keep > 0) {
    while (index.all.size() > static_cast<size_t>(max_to_keep)) {
      doomed.push_back(index.all.front());
      index.all.erase(index.all.begin());
    }
  }
  write_checkpoint_index(dir, index);
  for (const std::string& old : doomed) {
    std::string old_path = join_path(dir, old);
    if (::unlink(old_path.c_str()) != 0 && errno != ENOENT) {
      int err = errno;
      throw_error("save_checkpoint_in_dir: saved '", path, "' but cannot delete old checkpoint '",
                  old_path, "': ", std::strerror(err));
    }
  }
  return path;
}

std::string latest_checkpoint(const std::string& dir) {
  std::optional<CheckpointIndex> index = read_checkpoint_index(dir);
  if (!index || index->latest.empty()) return "";
  std::string path = join_path(dir, index->latest);
  SPIRE_CHECK(path_exists(path), "latest_checkpoint: index '", join_path(dir, kCheckpointIndexName),
              "' names '", index->latest, "' which does not exist");
  return path;
}

}  // namespace spire
