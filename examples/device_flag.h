// The examples' --device flag: parse_device_flag turns "cpu", "gpu", "gpu:N",
// "cuda" or "cuda:N" into a spire::Device and, for a GPU, checks that this
// build has a CUDA backend and that the device is visible, so that a bad
// --device fails at startup with a clear message rather than at the first
// Session::run. Each example then builds its whole graph (model, optimizer,
// global step, callbacks) under DeviceScope(graph, device). Header-only.
#pragma once

#include <cctype>
#include <string>

#include <spire.h>

namespace spire_examples {

/// The spellings --device accepts, for usage texts.
inline const char* device_flag_spellings() { return "cpu (default), gpu, gpu:N, cuda or cuda:N"; }

/// Parses the value of --device: "cpu" -> the CPU; "gpu"/"cuda" -> cuda:0;
/// "gpu:N"/"cuda:N" -> cuda:N. Throws spire::Error for any other spelling,
/// for a GPU when this build has no CUDA backend, and for a GPU index that is
/// not visible (no GPU, a driver problem, CUDA_VISIBLE_DEVICES).
inline spire::Device parse_device_flag(const std::string& value) {
  using spire::DeviceType;
  if (value == "cpu") return spire::Device::cpu();
  int index = -1;
  for (const std::string prefix : {"gpu", "cuda"}) {
    if (value == prefix) {
      index = 0;
      break;
    }
    if (value.rfind(prefix + ":", 0) != 0) continue;
    const std::string digits = value.substr(prefix.size() + 1);
    bool ok = !digits.empty() && digits.size() <= 4;
    for (char c : digits) ok = ok && std::isdigit(static_cast<unsigned char>(c));
    if (!ok) break;
    index = std::stoi(digits);
    break;
  }
  if (index < 0)
    spire::throw_error("--device ", value, ": expected ", device_flag_spellings());

  const spire::Device device = spire::Device::cuda(index);
  if (spire::find_device_backend(DeviceType::CUDA) == nullptr)
    spire::throw_error("--device ", value, ": this build of Spire has no CUDA backend (configured ",
                       "with -DSPIRE_CUDA=OFF or without a CUDA toolkit); use --device cpu");
  const int count = spire::device_count(DeviceType::CUDA);
  if (count == 0)
    spire::throw_error("--device ", value, ": no CUDA device is visible (the CUDA backend sees 0 ",
                       "devices: no GPU, no driver, or CUDA_VISIBLE_DEVICES hides them); use ",
                       "--device cpu");
  if (index >= count)
    spire::throw_error("--device ", value, ": ", device.to_string(), " is not visible (", count,
                       " CUDA device", count == 1 ? " is" : "s are", " visible: cuda:0",
                       count > 1 ? "..cuda:" + std::to_string(count - 1) : std::string(), ")");
  return device;
}

}  // namespace spire_examples
