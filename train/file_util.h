// File helpers shared by the trainer's on-disk formats (checkpoint.h,
// event_writer.h): crash-safe whole-file writes (temp file + fsync + rename),
// whole-file reads, directory creation, and CRC32C (Castagnoli) with
// TensorFlow's masking as used by TFRecord / TensorBoard event files.
// All failures throw spire::Error naming the path and strerror(errno).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace spire {

/// Replaces `path` with `bytes` atomically: writes `<path>.tmp.<pid>.<random>`
/// in the same directory, fsyncs it, renames it over `path` (atomic on POSIX)
/// and fsyncs the directory. Readers see either the old or the new content,
/// never a partial file; after a crash at most a stray temp file remains. On
/// failure the temp file is removed and spire::Error is thrown. The directory
/// must exist.
void atomic_write_file(const std::string& path, const std::string& bytes);
void atomic_write_file(const std::string& path, const void* data, size_t size);
/// Same, with the content given as consecutive parts (no concatenated copy).
void atomic_write_file_parts(const std::string& path, const std::vector<std::string_view>& parts);

/// Whole content of the file at `path`; throws spire::Error ("cannot open
/// '<path>': No such file or directory", ...) when it cannot be read.
std::string read_file(const std::string& path);

/// True when `path` exists (any file type).
bool path_exists(const std::string& path);

/// Creates `dir` and its missing parents (like `mkdir -p`); no-op when it
/// already exists as a directory; throws when it cannot be created.
void make_dirs(const std::string& dir);

/// Joins a directory and a file name with one '/'.
std::string join_path(const std::string& dir, const std::string& name);

/// CRC32C (Castagnoli polynomial 0x1EDC6F41, reflected 0x82F63B78) of
/// `n` bytes; crc32c("123456789") == 0xe3069283. Uses the SSE4.2 crc32
/// instruction when the CPU has it, a table otherwise.
uint32_t crc32c(const void* data, size_t n);
/// Continues a CRC32C: crc32c_extend(crc32c(a), b) == crc32c(a + b).
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n);

/// TensorFlow's CRC mask for CRCs stored next to the data they cover:
/// ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t mask_crc32c(uint32_t crc);
/// Inverse of mask_crc32c.
uint32_t unmask_crc32c(uint32_t masked);
/// mask_crc32c(crc32c(data, n)): the checksum of TFRecord / event files.
uint32_t masked_crc32c(const void* data, size_t n);

/// Lowercase 8-digit hexadecimal form of a CRC ("e3069283").
std::string crc32c_hex(uint32_t crc);

namespace detail {
/// The portable table implementation (exposed so tests can compare it with
/// the hardware path).
uint32_t crc32c_extend_software(uint32_t crc, const void* data, size_t n);
/// True when crc32c() uses the SSE4.2 instruction on this machine.
bool crc32c_uses_hardware();
}  // namespace detail

}  // namespace spire
