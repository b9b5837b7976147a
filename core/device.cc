#include "core/device.h"

#include <cctype>

#include "core/error.h"

namespace spire {

std::string Device::to_string() const {
  if (is_cpu()) return index == 0 ? std::string("cpu") : "cpu:" + std::to_string(index);
  return "cuda:" + std::to_string(index);
}

Device Device::parse(const std::string& spec) {
  std::string s;
  for (char c : spec) s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (!s.empty() && s[0] == '/') s = s.substr(1);
  if (s.rfind("device:", 0) == 0) s = s.substr(7);
  auto parse_index = [&](const std::string& rest) -> int {
    // rest is "" or ":N"
    if (rest.empty()) return 0;
    if (rest[0] != ':' || rest.size() < 2 || rest.size() > 7)
      throw_error("bad device '", spec, "': expected 'cpu', 'cpu:N', 'cuda' or 'cuda:N'");
    int idx = 0;
    for (size_t i = 1; i < rest.size(); ++i) {
      if (!std::isdigit(static_cast<unsigned char>(rest[i])))
        throw_error("bad device '", spec, "': the index must be a non-negative integer");
      idx = idx * 10 + (rest[i] - '0');
    }
    return idx;
  };
  if (s.rfind("cpu", 0) == 0) return cpu(parse_index(s.substr(3)));
  for (const char* prefix : {"cuda", "gpu"}) {
    std::string p(prefix);
    if (s.rfind(p, 0) == 0) return cuda(parse_index(s.substr(p.size())));
  }
  throw_error("bad device '", spec, "': expected 'cpu', 'cpu:N', 'cuda' or 'cuda:N'");
}

}  // namespace spire

// ---- device backends -------------------------------------------------------

#include <map>
#include <mutex>

#include "core/device_backend.h"

namespace spire {
namespace {

struct BackendTable {
  std::mutex mu;
  std::map<DeviceType, DeviceBackend> backends;
};

BackendTable& backend_table() {
  static BackendTable t;
  return t;
}

}  // namespace

void register_device_backend(DeviceType type, DeviceBackend backend) {
  auto& t = backend_table();
  std::lock_guard<std::mutex> lock(t.mu);
  t.backends[type] = std::move(backend);
}

const DeviceBackend* find_device_backend(DeviceType type) {
  auto& t = backend_table();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.backends.find(type);
  return it == t.backends.end() ? nullptr : &it->second;
}

int device_count(DeviceType type) {
  if (type == DeviceType::CPU) return 1;
  const DeviceBackend* b = find_device_backend(type);
  return b && b->device_count ? b->device_count() : 0;
}

void synchronize_device(const Device& device) {
  if (device.is_cpu()) return;
  const DeviceBackend* b = find_device_backend(device.type);
  if (b && b->synchronize) b->synchronize(device.index);
}

}  // namespace spire
