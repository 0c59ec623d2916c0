// Tensor descriptions (dtype, shape) and the runtime Tensor: a typed view of memory, owning or not.
// Shapes in the graph include the batch axis in front; model files speak of per-sample shapes.
// A Tensor never allocates behind the caller's back: empty() allocates once, view() never.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace braid {

enum class DType : uint8_t { f32, f64, bf16, f16, i32, i64 };

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);
std::optional<DType> parse_dtype(std::string_view s);
std::vector<std::string> dtype_names();
inline bool is_float(DType t) { return t == DType::f32 || t == DType::f64 || t == DType::bf16 || t == DType::f16; }
inline bool is_int(DType t) { return t == DType::i32 || t == DType::i64; }

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> d) : dims_(d) {}
  explicit Shape(std::vector<int64_t> d) : dims_(std::move(d)) {}
  int rank() const { return static_cast<int>(dims_.size()); }
  // Element count; asserts that it fits in int64 (the graph builder refuses larger shapes as user errors).
  int64_t numel() const;
  // Element count, or nullopt when a size is negative or the product does not fit in int64.
  std::optional<int64_t> checked_numel() const;
  int64_t operator[](int i) const { return dims_.at(static_cast<size_t>(i)); }
  int64_t& operator[](int i) { return dims_.at(static_cast<size_t>(i)); }
  // Axis counted from the end when negative (-1 is the last).
  int64_t dim(int axis) const { return dims_.at(static_cast<size_t>(norm_axis(axis))); }
  int norm_axis(int axis) const { return axis < 0 ? axis + rank() : axis; }
  const std::vector<int64_t>& dims() const { return dims_; }
  std::vector<int64_t>& dims() { return dims_; }
  int64_t back() const { return dims_.back(); }
  std::string str() const;  // "[2, 3]"
  bool operator==(const Shape& o) const { return dims_ == o.dims_; }
  bool operator!=(const Shape& o) const { return dims_ != o.dims_; }

 private:
  std::vector<int64_t> dims_;
};

struct TensorDesc {
  Shape shape;
  DType dtype = DType::f32;
  size_t bytes() const { return static_cast<size_t>(shape.numel()) * dtype_size(dtype); }
  // Bytes, or nullopt when the element count or the byte count does not fit in int64.
  std::optional<int64_t> checked_bytes() const;
  int64_t numel() const { return shape.numel(); }
  std::string str() const;  // "f32[2, 3]"
  bool operator==(const TensorDesc& o) const { return shape == o.shape && dtype == o.dtype; }
  bool operator!=(const TensorDesc& o) const { return !(*this == o); }
};

// A typed view of memory. Copying a Tensor copies the view, not the data.
class Tensor {
 public:
  Tensor() = default;
  static Tensor empty(const TensorDesc& desc);  // owning, 64-byte aligned, zero-filled
  static Tensor view(void* data, const TensorDesc& desc) { return Tensor(data, desc, nullptr); }

  const TensorDesc& desc() const { return desc_; }
  const Shape& shape() const { return desc_.shape; }
  DType dtype() const { return desc_.dtype; }
  int64_t numel() const { return desc_.shape.numel(); }
  size_t bytes() const { return desc_.bytes(); }
  bool defined() const { return data_ != nullptr || desc_.bytes() == 0; }
  void* raw() const { return data_; }

  template <typename T>
  T* data() const {
    BRAID_ASSERT(dtype_of<T>() == desc_.dtype, "tensor is ", dtype_name(desc_.dtype));
    return static_cast<T*>(data_);
  }
  // Same memory, another shape of the same element count.
  Tensor reshaped(const Shape& s) const;
  // The `desc` tensor starting `byte_offset` bytes into this one's memory, sharing its ownership (it keeps the
  // memory alive). For gradients that live in a data-parallel bucket (exec/pipeline.cpp).
  Tensor part(size_t byte_offset, const TensorDesc& desc) const;
  Tensor clone() const;  // owning deep copy
  void zero();
  void copy_from(const Tensor& other);  // same desc

 private:
  Tensor(void* data, TensorDesc desc, std::shared_ptr<void> owner)
      : data_(data), desc_(std::move(desc)), owner_(std::move(owner)) {}
  void* data_ = nullptr;
  TensorDesc desc_;
  std::shared_ptr<void> owner_;
};

// Reads element i of a floating tensor (f32 or f64) as double; for tests and small tools.
double get_as_double(const Tensor& t, int64_t i);
void set_from_double(const Tensor& t, int64_t i, double v);

// Whether two tensors' bytes overlap (views of the same memory; an undefined view overlaps nothing). Host or
// device pointers alike: only the addresses are compared.
inline bool shares_bytes(const Tensor& a, const Tensor& b) {
  auto* pa = static_cast<const char*>(a.raw());
  auto* pb = static_cast<const char*>(b.raw());
  return pa && pb && pa < pb + b.bytes() && pb < pa + a.bytes();
}

inline bool is_half(DType t) { return t == DType::bf16 || t == DType::f16; }
// The dtype parameters, gradients of parameters and statistics keep when values are `t`: f32 for 16-bit values
// (mixed precision: fp32 master weights), `t` otherwise.
inline DType master_dtype(DType t) { return is_half(t) ? DType::f32 : t; }
// Copies `from` into `to` (same shape, any floating dtypes: f32, f64, bf16, f16), converting each element;
// narrowing rounds to nearest even (core/half.h).
void convert_float(const Tensor& from, const Tensor& to);

}  // namespace braid
