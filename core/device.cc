#include "core/device.h"

#include <cctype>

#include "core/error.h"

namespace spire {

std::string Device::to_string() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

Device Device::parse(const std::string& spec) {
  std::string s;
  for (char c : spec) s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (!s.empty() && s[0] == '/') s = s.substr(1);
  if (s == "cpu" || s == "cpu:0") return cpu();
  for (const char* prefix : {"cuda", "gpu"}) {
    std::string p(prefix);
    if (s.rfind(p, 0) != 0) continue;
    std::string rest = s.substr(p.size());
    if (rest.empty()) return cuda(0);
    if (rest[0] == ':' && rest.size() > 1) {
      int idx = 0;
      for (size_t i = 1; i < rest.size(); ++i) {
        if (!std::isdigit(static_cast<unsigned char>(rest[i]))) throw_error("bad device '", spec, "'");
        idx = idx * 10 + (rest[i] - '0');
      }
      return cuda(idx);
    }
  }
  throw_error("bad device '", spec, "': expected 'cpu', 'cuda' or 'cuda:N'");
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
