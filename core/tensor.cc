#include "core/tensor.h"

#include <cmath>
#include <sstream>

#include "core/device_backend.h"

namespace spire {

Buffer::Buffer(Allocator* alloc, size_t bytes)
    : alloc_(alloc), data_(alloc->allocate(bytes)), size_(bytes) {}

Buffer::~Buffer() { alloc_->deallocate(data_, size_); }

Tensor::Tensor(DType dtype, const Shape& shape, Device device)
    : dtype_(dtype), shape_(shape), device_(device) {
  SPIRE_CHECK(shape.is_fully_defined(), "Tensor: cannot allocate a tensor of partial shape ",
              shape.to_string());
  num_elements_ = shape.num_elements();
  // Checked: a shape whose byte size overflows is an error, not a small buffer.
  buffer_ = std::make_shared<Buffer>(get_allocator(device),
                                     static_cast<size_t>(shape.num_bytes(dtype_size(dtype))));
}

Tensor Tensor::full(DType dtype, const Shape& shape, double value) {
  Tensor t(dtype, shape);
  visit_dtype(dtype, "Tensor::full", [&](auto zero) {
    using T = decltype(zero);
    T* p = t.data<T>();
    for (int64_t i = 0; i < t.num_elements(); ++i) p[i] = static_cast<T>(value);
  });
  return t;
}

void Tensor::check_type(DType want, const char* what) const {
  SPIRE_CHECK(dtype_ == want, "Tensor::", what, ": tensor is ", type_string(),
              " but ", dtype_name(want), " was requested");
}

double Tensor::element_as_double(int64_t i) const {
  SPIRE_CHECK(device_.is_cpu(), "Tensor::element_as_double: tensor is on ", device_.to_string());
  SPIRE_CHECK(i >= 0 && i < num_elements_, "Tensor: element ", i, " out of range for ",
              type_string());
  return visit_dtype(dtype_, "Tensor::element_as_double", [&](auto zero) -> double {
    using T = decltype(zero);
    return static_cast<double>(static_cast<const T*>(raw_data())[i]);
  });
}

Tensor Tensor::reshaped(const Shape& shape) const {
  SPIRE_CHECK(shape.is_fully_defined() && shape.num_elements() == num_elements_,
              "Tensor::reshaped: cannot view ", type_string(), " as ", shape.to_string());
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::clone() const {
  if (!defined()) return Tensor();
  Tensor t(dtype_, shape_, device_);
  if (nbytes()) buffer_->allocator()->copy_within(t.raw_data(), raw_data(), nbytes());
  return t;
}

Tensor Tensor::to(const Device& device) const {
  if (device == device_) return *this;
  Tensor t(dtype_, shape_, device);
  if (!nbytes()) return t;
  if (device_.is_cpu()) {
    t.buffer_->allocator()->copy_from_host(t.raw_data(), raw_data(), nbytes());
  } else if (device.is_cpu()) {
    buffer_->allocator()->copy_to_host(t.raw_data(), raw_data(), nbytes());
  } else {
    // Device to device: the backend orders the copy on both devices' queues.
    const DeviceBackend* b = device_.type == device.type ? find_device_backend(device.type) : nullptr;
    if (b == nullptr || !b->copy_between) {
      Tensor host = to(Device::cpu());
      return host.to(device);
    }
    b->copy_between(t.raw_data(), device.index, raw_data(), device_.index, nbytes());
  }
  return t;
}

void Tensor::poison() {
  SPIRE_CHECK(device_.is_cpu(), "Tensor::poison: CPU tensors only");
  if (is_floating(dtype_)) {
    visit_dtype(dtype_, "poison", [&](auto zero) {
      using T = decltype(zero);
      if constexpr (std::is_floating_point_v<T>) {
        T* p = data<T>();
        for (int64_t i = 0; i < num_elements_; ++i) p[i] = std::numeric_limits<T>::quiet_NaN();
      }
    });
  } else if (dtype_ == DType::Bool) {
    std::memset(raw_data(), 1, nbytes());
  } else if (nbytes()) {
    std::memset(raw_data(), 0x5A, nbytes());
  }
}

std::string Tensor::type_string() const {
  return str_cat(dtype_name(dtype_), shape_.to_string());
}

std::string Tensor::to_string(int64_t max_elements) const {
  if (!defined()) return "<undefined tensor>";
  std::ostringstream os;
  os << type_string();
  if (!device_.is_cpu()) os << '@' << device_.to_string();
  os << " {";
  Tensor host = to(Device::cpu());
  for (int64_t i = 0; i < num_elements_ && i < max_elements; ++i) {
    if (i) os << ", ";
    os << host.element_as_double(i);
  }
  if (num_elements_ > max_elements) os << ", ...";
  os << '}';
  return os.str();
}

}  // namespace spire
