// Tensor: a shape and dtype over contiguous storage owned by a device Buffer.
// A tensor may be a view into a larger buffer (parameters and gradients of a
// stage live in one buffer each, so optimizers and collectives see one span).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/device.hpp"
#include "backends/dtype.hpp"

namespace troupe {

/// Dimensions, outermost first.
using Shape = std::vector<std::int64_t>;

std::int64_t shape_numel(const Shape& shape);
/// "[4, 128]".
std::string shape_string(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;
  /// Uninitialised storage of shape x dtype on `device`.
  static Expected<Tensor> empty(Device& device, Shape shape, DType dtype = DType::f32,
                                Sharing sharing = Sharing::process);
  /// Zero-filled storage (filled on the device's default stream, waited for).
  static Expected<Tensor> zeros(Device& device, Shape shape, DType dtype = DType::f32,
                                Sharing sharing = Sharing::process);

  /// Host memory that `device` copies to and from at full speed (pinned), for
  /// staging what the host writes (token batches) or reads (snapshots).
  static Expected<Tensor> pinned_host(Device& device, Shape shape, DType dtype = DType::f32);

  /// A tensor over memory someone else owns (e.g. a shared-memory ring slot);
  /// the memory must outlive every use of the tensor.
  static Tensor borrow(Device& device, void* data, Shape shape, DType dtype = DType::f32);

  /// A tensor sharing this one's storage, starting `offset` elements in.
  Tensor view(std::int64_t offset, Shape shape) const;
  /// Same storage, new shape with the same element count.
  Tensor reshaped(Shape shape) const;

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  std::int64_t dim(int i) const { return shape_[static_cast<std::size_t>(i < 0 ? i + rank() : i)]; }
  int rank() const { return static_cast<int>(shape_.size()); }
  std::int64_t numel() const { return shape_numel(shape_); }
  DType dtype() const { return dtype_; }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype_); }
  Device& device() const { return storage_->device(); }
  /// The device's own memory, or pinned host memory it stages through.
  Memory memory() const { return storage_->memory(); }

  void* raw() const {
    return static_cast<char*>(storage_->data()) + offset_ * static_cast<std::int64_t>(dtype_size(dtype_));
  }
  /// The elements as T; T must be the tensor's dtype (checked in every build:
  /// reading bf16 bits as floats is a silent wrong answer, not a crash).
  template <class T>
  T* data() const {
    if (dtype_of<std::remove_const_t<T>>() != dtype_) dtype_mismatch(dtype_of<std::remove_const_t<T>>());
    return static_cast<T*>(raw());
  }
  float* f32() const { return data<float>(); }

 private:
  [[noreturn]] void dtype_mismatch(DType asked) const;
  template <class Allocate>
  static Expected<Tensor> allocated(Shape shape, DType dtype, Allocate&& allocate);

  std::shared_ptr<Buffer> storage_;
  Shape shape_;
  DType dtype_ = DType::f32;
  std::int64_t offset_ = 0;
};

}  // namespace troupe
