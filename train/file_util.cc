// File helpers for the trainer's on-disk formats: atomic whole-file writes,
// whole-file reads, mkdir -p, CRC32C (table + SSE4.2) and TF's CRC mask.
#include "train/file_util.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <atomic>
#include <array>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define SPIRE_CRC32C_HW 1
#endif

#include "core/error.h"

namespace spire {
namespace {

std::string errno_text(int err) { return std::strerror(err); }

std::string dir_of(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Writes all of [data, data + size) to fd, retrying partial writes and EINTR.
bool write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// A name unlikely to collide: pid, a per-process counter and the clock,
// mixed (O_EXCL catches the remaining collisions).
std::string temp_name_for(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  uint64_t x = static_cast<uint64_t>(
                   std::chrono::steady_clock::now().time_since_epoch().count()) ^
               (counter.fetch_add(1) * 0x9e3779b97f4a7c15ULL) ^
               (reinterpret_cast<uintptr_t>(&counter) << 7);
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(x));
  return str_cat(path, ".tmp.", static_cast<long>(::getpid()), ".", buf);
}

}  // namespace

void atomic_write_file(const std::string& path, const std::string& bytes) {
  atomic_write_file(path, bytes.data(), bytes.size());
}

void atomic_write_file(const std::string& path, const void* data, size_t size) {
  atomic_write_file_parts(path, {std::string_view(static_cast<const char*>(data), size)});
}

void atomic_write_file_parts(const std::string& path, const std::vector<std::string_view>& parts) {
  SPIRE_CHECK(!path.empty(), "atomic_write_file: empty path");
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; attempt < 16 && fd < 0; ++attempt) {
    tmp = temp_name_for(path);
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    int err = errno;
    throw_error("atomic_write_file: cannot create temporary file '", tmp, "' for '", path,
                "': ", errno_text(err));
  }
  auto fail = [&](const char* what) {
    int err = errno;
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw_error("atomic_write_file: cannot ", what, " '", path, "' (temporary file '", tmp,
                "'): ", errno_text(err));
  };
  for (std::string_view part : parts)
    if (!write_all(fd, part.data(), part.size())) fail("write");
  if (::fsync(fd) != 0) fail("fsync");
  int rc = ::close(fd);
  fd = -1;
  if (rc != 0) fail("close");
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail("rename over");
  // Make the rename itself durable. Some file systems refuse fsync on a
  // directory (EINVAL); the rename has happened then, so that is not an error.
  std::string dir = dir_of(path);
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) {
    int err = errno;
    throw_error("atomic_write_file: wrote '", path, "' but cannot open its directory '", dir,
                "' to fsync it: ", errno_text(err));
  }
  if (::fsync(dfd) != 0 && errno != EINVAL && errno != ENOTSUP) {
    int err = errno;
    ::close(dfd);
    throw_error("atomic_write_file: wrote '", path, "' but cannot fsync its directory '", dir,
                "': ", errno_text(err));
  }
  ::close(dfd);
}

std::string read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    throw_error("read_file: cannot open '", path, "': ", errno_text(err));
  }
  std::string out;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw_error("read_file: '", path, "' is a directory");
  }
  if (st.st_size > 0) out.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      throw_error("read_file: cannot read '", path, "': ", errno_text(err));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

bool path_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

void make_dirs(const std::string& dir) {
  SPIRE_CHECK(!dir.empty(), "make_dirs: empty path");
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0) {
    SPIRE_CHECK(S_ISDIR(st.st_mode), "make_dirs: '", dir, "' exists and is not a directory");
    return;
  }
  std::string parent = dir_of(dir);
  if (parent != dir && parent != "." && parent != "/") make_dirs(parent);
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    int err = errno;
    throw_error("make_dirs: cannot create directory '", dir, "': ", errno_text(err));
  }
  SPIRE_CHECK(::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode), "make_dirs: '", dir,
              "' is not a directory");
}

std::string join_path(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

// ---- CRC32C ------------------------------------------------------------------

namespace {

constexpr uint32_t kCastagnoliReflected = 0x82F63B78u;

// Slicing-by-8 tables: t[0] is the classic byte table, t[k][b] the CRC of
// byte b followed by k zero bytes.
struct Crc32cTables {
  uint32_t t[8][256];
  Crc32cTables() {
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t c = b;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kCastagnoliReflected : c >> 1;
      t[0][b] = c;
    }
    for (uint32_t b = 0; b < 256; ++b)
      for (int k = 1; k < 8; ++k) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xff];
  }
};

const Crc32cTables& tables() {
  static const Crc32cTables tabs;
  return tabs;
}

#ifdef SPIRE_CRC32C_HW
__attribute__((target("sse4.2"))) uint32_t crc32c_hw(uint32_t crc, const unsigned char* p,
                                                     size_t n) {
  uint64_t c = ~crc;
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
    --n;
  }
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
    p += 8;
    n -= 8;
  }
  while (n > 0) {
    c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
    --n;
  }
  return ~static_cast<uint32_t>(c);
}

bool cpu_has_sse42() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}
#endif

}  // namespace

namespace detail {

uint32_t crc32c_extend_software(uint32_t crc, const void* data, size_t n) {
  const auto& t = tables().t;
  const unsigned char* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
  while (n >= 8) {
    // Little-endian byte order of the 8 bytes, as the reflected CRC needs.
    uint32_t lo = c ^ (uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 |
                       uint32_t(p[3]) << 24);
    uint32_t hi = uint32_t(p[4]) | uint32_t(p[5]) << 8 | uint32_t(p[6]) << 16 |
                  uint32_t(p[7]) << 24;
    c = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^
        t[3][hi & 0xff] ^ t[2][(hi >> 8) & 0xff] ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c = t[0][(c ^ *p++) & 0xff] ^ (c >> 8);
  return ~c;
}

bool crc32c_uses_hardware() {
#ifdef SPIRE_CRC32C_HW
  return cpu_has_sse42();
#else
  return false;
#endif
}

}  // namespace detail

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n) {
  if (n == 0) return crc;
#ifdef SPIRE_CRC32C_HW
  if (cpu_has_sse42()) return crc32c_hw(crc, static_cast<const unsigned char*>(data), n);
#endif
  return detail::crc32c_extend_software(crc, data, n);
}

uint32_t crc32c(const void* data, size_t n) { return crc32c_extend(0, data, n); }

uint32_t mask_crc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

uint32_t unmask_crc32c(uint32_t masked) {
  uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

uint32_t masked_crc32c(const void* data, size_t n) { return mask_crc32c(crc32c(data, n)); }

std::string crc32c_hex(uint32_t crc) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%08x", crc);
  return buf;
}

}  // namespace spire
