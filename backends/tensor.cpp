// Tensor construction and views.
#include "backends/tensor.hpp"

#include <cassert>
#include <cstdio>
#include <cstdlib>

namespace troupe {

std::int64_t shape_numel(const Shape& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::string shape_string(const Shape& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

Tensor Tensor::borrow(Device& device, void* data, Shape shape, DType dtype) {
  Tensor t;
  const auto bytes = static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype);
  t.storage_ = std::make_shared<Buffer>(device, data, bytes, [](void*) {});
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  return t;
}

// A tensor of shape x dtype over memory `allocate` gives for its byte size.
template <class Allocate>
Expected<Tensor> Tensor::allocated(Shape shape, DType dtype, Allocate&& allocate) {
  for (auto d : shape)
    if (d < 0) return make_error("tensor: negative dimension in shape ", shape_string(shape));
  auto buffer = allocate(static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype));
  if (!buffer) return buffer.error();
  Tensor t;
  t.storage_ = std::move(*buffer);
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  return t;
}

Expected<Tensor> Tensor::empty(Device& device, Shape shape, DType dtype, Sharing sharing) {
  return allocated(std::move(shape), dtype, [&](std::size_t bytes) {
    return sharing == Sharing::host ? device.allocate_host_shared(bytes) : device.allocate(bytes);
  });
}

Expected<Tensor> Tensor::pinned_host(Device& device, Shape shape, DType dtype) {
  return allocated(std::move(shape), dtype, [&](std::size_t bytes) { return device.allocate_pinned_host(bytes); });
}

Expected<Tensor> Tensor::zeros(Device& device, Shape shape, DType dtype, Sharing sharing) {
  auto t = empty(device, std::move(shape), dtype, sharing);
  if (!t || t->nbytes() == 0) return t;
  Stream& s = device.default_stream();
  if (Status z = device.fill_zero(t->raw(), t->nbytes(), s); !z) return z.error();
  s.synchronize();
  return t;
}

void Tensor::dtype_mismatch(DType asked) const {
  std::fprintf(stderr, "tensor: %s data read as %s (shape %s)\n", std::string(dtype_name(dtype_)).c_str(),
               std::string(dtype_name(asked)).c_str(), shape_string(shape_).c_str());
  std::abort();
}

Tensor Tensor::view(std::int64_t offset, Shape shape) const {
  assert(offset >= 0);
  assert(static_cast<std::size_t>((offset_ + offset + shape_numel(shape))) * dtype_size(dtype_) <=
         storage_->bytes());
  Tensor t = *this;
  t.offset_ = offset_ + offset;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::reshaped(Shape shape) const {
  assert(shape_numel(shape) == numel());
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

}  // namespace troupe
