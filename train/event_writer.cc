// TensorBoard event files: hand-written protobuf encoding of
// tensorflow.Event / Summary, TFRecord framing with masked CRC32C, and the
// EventFileWriter that appends them (see event_writer.h).
#include "train/event_writer.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "train/file_util.h"

namespace spire {
namespace {

// ---- protobuf wire format ----
enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void put_varint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void put_key(std::string* out, uint32_t field, WireType wt) {
  put_varint(out, (uint64_t{field} << 3) | wt);
}

void put_fixed(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void put_double(std::string* out, uint32_t field, double d) {
  uint64_t bits;
  std::memcpy(&bits, &d, 8);
  put_key(out, field, kFixed64);
  put_fixed(out, bits, 8);
}

void put_float(std::string* out, uint32_t field, float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  put_key(out, field, kFixed32);
  put_fixed(out, bits, 4);
}

void put_int64(std::string* out, uint32_t field, int64_t v) {
  put_key(out, field, kVarint);
  put_varint(out, static_cast<uint64_t>(v));  // negative: 10-byte two's complement
}

void put_bytes(std::string* out, uint32_t field, const std::string& bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out->append(bytes);
}

// tensorflow.Event field numbers.
constexpr uint32_t kEventWallTime = 1, kEventStep = 2, kEventFileVersion = 3, kEventSummary = 5;
// tensorflow.Summary / Summary.Value field numbers.
constexpr uint32_t kSummaryValue = 1, kValueTag = 1, kValueSimpleValue = 2;

std::string event_header(double wall_time, int64_t step) {
  std::string out;
  put_double(&out, kEventWallTime, wall_time);
  put_int64(&out, kEventStep, step);
  return out;
}

uint64_t read_le(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

std::string host_name() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "localhost";
  std::string h(buf);
  for (char& c : h)
    if (c == '/') c = '_';
  return h;
}

}  // namespace

std::string encode_file_version_event(double wall_time, int64_t step,
                                      const std::string& file_version) {
  std::string out = event_header(wall_time, step);
  put_bytes(&out, kEventFileVersion, file_version);
  return out;
}

std::string encode_scalar_event(double wall_time, int64_t step,
                                const std::vector<std::pair<std::string, float>>& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    put_bytes(&v, kValueTag, tag);
    put_float(&v, kValueSimpleValue, value);
    put_bytes(&summary, kSummaryValue, v);
  }
  std::string out = event_header(wall_time, step);
  put_bytes(&out, kEventSummary, summary);
  return out;
}

std::string encode_tfrecord(const std::string& data) {
  std::string out;
  out.reserve(data.size() + 16);
  put_fixed(&out, data.size(), 8);
  put_fixed(&out, masked_crc32c(out.data(), 8), 4);
  out.append(data);
  put_fixed(&out, masked_crc32c(data.data(), data.size()), 4);
  return out;
}

std::vector<std::string> read_tfrecords(const std::string& path) {
  std::string bytes = read_file(path);
  std::vector<std::string> records;
  size_t pos = 0;
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  while (pos < bytes.size()) {
    size_t index = records.size();
    auto fail = [&](auto&&... args) {
      throw_error("read_tfrecords: '", path, "': record ", index, " at offset ", pos, ": ",
                  std::forward<decltype(args)>(args)...);
    };
    if (bytes.size() - pos < 12) fail("truncated length header");
    uint64_t len = read_le(p + pos, 8);
    uint32_t len_crc = static_cast<uint32_t>(read_le(p + pos + 8, 4));
    if (masked_crc32c(p + pos, 8) != len_crc) fail("length CRC mismatch (corrupt record)");
    if (len > bytes.size() - pos - 12 || bytes.size() - pos - 12 - len < 4)
      fail("truncated record (length ", len, ")");
    const unsigned char* data = p + pos + 12;
    uint32_t data_crc = static_cast<uint32_t>(read_le(data + len, 4));
    if (masked_crc32c(data, len) != data_crc) fail("data CRC mismatch (corrupt record)");
    records.emplace_back(reinterpret_cast<const char*>(data), len);
    pos += 12 + len + 4;
  }
  return records;
}

double unix_time_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

EventFileWriter::EventFileWriter(const std::string& logdir, const std::string& filename_suffix) {
  SPIRE_CHECK(filename_suffix.find('/') == std::string::npos, "EventFileWriter: filename_suffix '",
              filename_suffix, "' must not contain '/'");
  make_dirs(logdir);
  static std::atomic<uint64_t> counter{0};
  double now = unix_time_now();
  std::string base = str_cat("events.out.tfevents.", static_cast<int64_t>(now), ".", host_name(),
                             ".", static_cast<long>(::getpid()), ".");
  int fd = -1;
  for (int attempt = 0; attempt < 1000 && fd < 0; ++attempt) {
    path_ = join_path(logdir, str_cat(base, counter.fetch_add(1), filename_suffix));
    fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    int err = errno;
    throw_error("EventFileWriter: cannot create event file '", path_, "': ", std::strerror(err));
  }
  file_ = ::fdopen(fd, "wb");
  if (!file_) {
    int err = errno;
    ::close(fd);
    throw_error("EventFileWriter: cannot open event file '", path_, "': ", std::strerror(err));
  }
  std::lock_guard<std::mutex> lock(mu_);
  try {
    write_record_locked(encode_file_version_event(now, 0, "brain.Event:2"));
    flush_locked();
  } catch (...) {
    std::fclose(file_);  // no destructor runs for a throwing constructor
    file_ = nullptr;
    throw;
  }
}

EventFileWriter::~EventFileWriter() {
  try {
    close();
  } catch (...) {
    // Destructors must not throw; close() reports errors to callers who ask.
  }
}

void EventFileWriter::add_scalar(const std::string& tag, double value, int64_t step) {
  add_scalar(tag, value, step, unix_time_now());
}

void EventFileWriter::add_scalar(const std::string& tag, double value, int64_t step,
                                 double wall_time) {
  std::string event = encode_scalar_event(wall_time, step, {{tag, static_cast<float>(value)}});
  std::lock_guard<std::mutex> lock(mu_);
  write_record_locked(event);
}

void EventFileWriter::add_scalars(const std::map<std::string, double>& scalars, int64_t step) {
  std::vector<std::pair<std::string, float>> values;
  for (const auto& [tag, v] : scalars) values.emplace_back(tag, static_cast<float>(v));
  std::string event = encode_scalar_event(unix_time_now(), step, values);
  std::lock_guard<std::mutex> lock(mu_);
  write_record_locked(event);
}

void EventFileWriter::write_event(const std::string& serialized_event) {
  std::lock_guard<std::mutex> lock(mu_);
  write_record_locked(serialized_event);
}

void EventFileWriter::write_record_locked(const std::string& data) {
  SPIRE_CHECK(file_, "EventFileWriter: '", path_, "' is closed");
  std::string record = encode_tfrecord(data);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size()) {
    int err = errno;
    throw_error("EventFileWriter: cannot write to '", path_, "': ", std::strerror(err));
  }
}

void EventFileWriter::flush_locked() {
  SPIRE_CHECK(file_, "EventFileWriter: '", path_, "' is closed");
  if (std::fflush(file_) != 0) {
    int err = errno;
    throw_error("EventFileWriter: cannot flush '", path_, "': ", std::strerror(err));
  }
  if (::fsync(::fileno(file_)) != 0 && errno != EINVAL) {
    int err = errno;
    throw_error("EventFileWriter: cannot fsync '", path_, "': ", std::strerror(err));
  }
}

void EventFileWriter::flush() {
  std::lock_guard<std::mutex> lock(mu_);
  flush_locked();
}

void EventFileWriter::close() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!file_) return;
  std::FILE* f = file_;
  std::string error;
  try {
    flush_locked();
  } catch (const Error& e) {
    error = e.what();
  }
  file_ = nullptr;
  if (std::fclose(f) != 0 && error.empty())
    error = str_cat("EventFileWriter: cannot close '", path_, "': ", std::strerror(errno));
  if (!error.empty()) throw Error(error);
}

bool EventFileWriter::is_open() const {
  std::lock_guard<std::mutex> lock(mu_);
  return file_ != nullptr;
}

}  // namespace spire
