// TensorBoard event files: EventFileWriter appends scalar summaries to
// `<logdir>/events.out.tfevents.<unix_time>.<hostname>.<pid>.<n>` so that
// TensorBoard (or tensorboard's Python event loaders) can plot training
// curves. The trainer's summary callback writes through it.
//
// The file is a TFRecord stream: each record is
//   uint64 length (LE), uint32 masked_crc32c(length bytes), data,
//   uint32 masked_crc32c(data)
// where data is a serialized tensorflow.Event protobuf, encoded by hand here
// (no protobuf dependency). The first record carries file_version
// "brain.Event:2". Event files are append-only streams: they are flushed
// (fflush + fsync), not atomically replaced.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace spire {

/// Serialized tensorflow.Event{wall_time, step, file_version}.
std::string encode_file_version_event(double wall_time, int64_t step,
                                      const std::string& file_version);
/// Serialized tensorflow.Event{wall_time, step, summary{value{tag, simple_value}...}}
/// with one Summary.Value per (tag, value), in the given order.
std::string encode_scalar_event(double wall_time, int64_t step,
                                const std::vector<std::pair<std::string, float>>& scalars);

/// One TFRecord: length, masked CRC of the length, data, masked CRC of data.
std::string encode_tfrecord(const std::string& data);

/// Reads every record of a TFRecord file, verifying both CRCs of each;
/// throws spire::Error naming the file, the record index and offset on a
/// CRC mismatch or a truncated record.
std::vector<std::string> read_tfrecords(const std::string& path);

/// Seconds since the Unix epoch (wall clock), as TensorBoard expects.
double unix_time_now();

/// Writes a TensorBoard event file. Thread-safe. Errors throw spire::Error;
/// the destructor flushes and closes, swallowing errors (call close() to see
/// them).
class EventFileWriter {
 public:
  /// Creates `logdir` if needed and a new event file in it (never reuses an
  /// existing name), then writes the file_version record and flushes.
  /// `filename_suffix` is appended to the file name (as TF's FileWriter).
  explicit EventFileWriter(const std::string& logdir, const std::string& filename_suffix = "");
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  /// Full path of the event file.
  const std::string& path() const { return path_; }

  /// Appends a scalar summary (stored as float) at `step`, stamped now.
  void add_scalar(const std::string& tag, double value, int64_t step);
  /// Same with an explicit wall time (seconds since the epoch).
  void add_scalar(const std::string& tag, double value, int64_t step, double wall_time);
  /// Appends one event holding all `scalars` (one Summary.Value each) at `step`.
  void add_scalars(const std::map<std::string, double>& scalars, int64_t step);
  /// Appends an already serialized tensorflow.Event as one record.
  void write_event(const std::string& serialized_event);

  /// Pushes buffered records to the OS and fsyncs the file.
  void flush();
  /// Flushes and closes; later add_* calls throw. Idempotent.
  void close();
  bool is_open() const;

 private:
  void write_record_locked(const std::string& data);
  void flush_locked();

  mutable std::mutex mu_;
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace spire
