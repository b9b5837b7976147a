#include "core/kernel_registry.h"

#include <sstream>

#include "core/op_registry.h"

namespace spire {

SessionState& KernelContext::state() const {
  if (!state_) fail("this kernel needs session state but none was given");
  return *state_;
}

std::string KernelContext::describe_runtime_inputs() const {
  std::ostringstream os;
  for (int i = 0; i < num_inputs(); ++i) {
    if (i) os << ", ";
    const Tensor& t = inputs_[i];
    os << (t.defined() ? t.type_string() : std::string("<undefined>"));
  }
  if (num_inputs() == 0) os << "(none)";
  return os.str();
}

KernelRegistry& KernelRegistry::global() {
  static KernelRegistry r;
  return r;
}

void KernelRegistry::add(const std::string& op, DeviceType device, DType dtype, KernelFn fn) {
  auto key = std::make_tuple(op, device, dtype);
  SPIRE_CHECK(!kernels_.count(key), "kernel for op '", op, "' on ",
              Device{device, 0}.to_string(), " for ", dtype_name(dtype), " registered twice");
  kernels_[key] = std::move(fn);
}

const KernelFn* KernelRegistry::find(const std::string& op, DeviceType device,
                                     DType dtype) const {
  auto it = kernels_.find(std::make_tuple(op, device, dtype));
  return it == kernels_.end() ? nullptr : &it->second;
}

std::vector<std::tuple<std::string, DeviceType, DType>> KernelRegistry::keys() const {
  std::vector<std::tuple<std::string, DeviceType, DType>> out;
  for (const auto& kv : kernels_) out.push_back(kv.first);
  return out;
}

DType kernel_dtype(const Node& node) {
  const KernelDTypeRule& r = node.op_def().kernel_dtype_rule();
  switch (r.kind) {
    case KernelDTypeRule::kInput: return node.input(r.index).dtype();
    case KernelDTypeRule::kAttr: return node.attr<DType>(r.attr);
    case KernelDTypeRule::kOutput: return node.output_dtype(r.index);
    case KernelDTypeRule::kFirstInput:
    default:
      if (node.num_inputs() > 0) return node.input(0).dtype();
      return node.num_outputs() > 0 ? node.output_dtype(0) : DType::F32;
  }
}

}  // namespace spire
