// Device: where a tensor lives and a kernel runs: CPU device i (logical CPU
// devices, as in TensorFlow: a Session splits the host's threads and memory
// statistics among `SessionOptions::num_cpu_devices` of them, so N CPU
// devices behave like N GPUs), or CUDA device i.
#pragma once

#include <ostream>
#include <string>

namespace spire {

enum class DeviceType : uint8_t { CPU = 0, CUDA = 1 };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static Device cpu(int i = 0) { return {DeviceType::CPU, i}; }
  static Device cuda(int i = 0) { return {DeviceType::CUDA, i}; }
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  /// "cpu" (CPU device 0), "cpu:1", "cuda:0".
  std::string to_string() const;
  /// Parses "cpu", "cpu:N", "cuda", "cuda:N" (also "gpu:N", a leading '/',
  /// and TensorFlow's "/device:CPU:N" / "/device:GPU:N"); throws spire::Error
  /// otherwise.
  static Device parse(const std::string& s);

  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  bool operator<(const Device& o) const {
    return type != o.type ? type < o.type : index < o.index;
  }
};

inline std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.to_string(); }

}  // namespace spire
