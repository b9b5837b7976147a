// Checkpoints: named tensors saved in the safetensors format
// (https://github.com/huggingface/safetensors), so other tools (the Python
// `safetensors` package, PyTorch, NumPy) read Spire checkpoints and Spire
// reads theirs. Plus a TF-style `checkpoint` index file that tracks the
// checkpoints of a training directory (latest first, oldest deleted beyond
// max_to_keep). The trainer's save/restore callbacks are built on these.
//
// File layout: 8-byte little-endian header length N, N bytes of JSON header
//   {"__metadata__": {"k": "v", ...},
//    "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
// padded with spaces to a multiple of 8 bytes, then the data section: the raw
// little-endian tensor bytes, contiguous in the order of their offsets.
//
// Integrity: Spire adds to __metadata__ "spire_format_version", the CRC32C of
// the data section ("spire_crc32c") and a CRC32C of the header itself
// ("spire_header_crc32c", over the compact JSON dump of the header without
// that key), so a truncated file or any flipped bit is reported instead of
// silently loading wrong weights. A file without these keys (written by
// another tool) is fully validated structurally but has no checksum to
// verify. Metadata keys starting with "spire_" are reserved.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace spire {

/// Version written to "spire_format_version"; files with a higher version
/// are refused.
inline constexpr int kCheckpointFormatVersion = 1;

/// Content of a checkpoint file.
struct Checkpoint {
  std::map<std::string, Tensor> tensors;
  /// The whole __metadata__ section, including the "spire_*" keys.
  std::map<std::string, std::string> metadata;
};

/// Writes `tensors` (any device; copied to the CPU) and `metadata` to `path`
/// atomically (see atomic_write_file). Supports f32, f64, i32, i64, bool (and
/// f16/bf16 as raw storage). Throws spire::Error for an undefined tensor, an
/// unsupported dtype, a reserved name ("__metadata__") or metadata key
/// ("spire_*"), or an I/O failure.
void save_checkpoint(const std::string& path, const std::map<std::string, Tensor>& tensors,
                     const std::map<std::string, std::string>& metadata = {});

/// Reads and validates a checkpoint; returns tensors (CPU) and metadata.
/// Nothing is returned unless the whole file is valid: a file shorter than 8
/// bytes, an oversized header (> 100 MiB or past the end of the file),
/// malformed JSON, an unknown dtype, bad shapes, data offsets that are out of
/// range / overlapping / leave gaps / disagree with dtype size x shape, a
/// data section of the wrong length (truncated file, trailing bytes), or a
/// checksum mismatch all throw spire::Error naming the file and the problem.
Checkpoint read_checkpoint(const std::string& path);

/// read_checkpoint(path).tensors.
std::map<std::string, Tensor> load_checkpoint(const std::string& path);

/// The `checkpoint` index file of a training directory, TF style: JSON
/// {"latest": "model-1200.safetensors", "all": ["model-1000...", ...]} with
/// file names relative to the directory, "all" oldest first.
struct CheckpointIndex {
  std::string latest;
  std::vector<std::string> all;
};

/// Name of the index file inside a checkpoint directory.
inline constexpr const char* kCheckpointIndexName = "checkpoint";

/// Reads `<dir>/checkpoint`; std::nullopt when it does not exist; throws
/// spire::Error when it is unreadable or corrupt (bad JSON, wrong fields,
/// names with a '/').
std::optional<CheckpointIndex> read_checkpoint_index(const std::string& dir);

/// Writes `<dir>/checkpoint` atomically.
void write_checkpoint_index(const std::string& dir, const CheckpointIndex& index);

/// Saves `<dir>/<prefix>-<step>.safetensors` (creating `dir` if needed),
/// makes it the index's latest entry and deletes the oldest checkpoints
/// beyond `max_to_keep` (<= 0 keeps all). The index is rewritten before old
/// files are deleted, so it never names a missing file. Throws when the
/// existing index is corrupt (it is not overwritten). Returns the new path.
std::string save_checkpoint_in_dir(const std::string& dir, const std::string& prefix,
                                   int64_t step, const std::map<std::string, Tensor>& tensors,
                                   int max_to_keep = 5,
                                   const std::map<std::string, std::string>& metadata = {});

/// Path of the latest checkpoint recorded in `<dir>/checkpoint`, or "" when
/// there is no index. Throws when the index is corrupt or names a file that
/// does not exist.
std::string latest_checkpoint(const std::string& dir);

}  // namespace spire
