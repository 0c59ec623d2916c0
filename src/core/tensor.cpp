// DType tables, shape printing and Tensor storage.
#include "core/tensor.h"

#include "core/half.h"

#include <cstdlib>
#include <cstring>

namespace braid {

namespace {
struct DTypeInfo {
  DType t;
  const char* name;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {{DType::f32, "f32", 4}, {DType::f64, "f64", 8}, {DType::bf16, "bf16", 2},
                                 {DType::f16, "f16", 2}, {DType::i32, "i32", 4}, {DType::i64, "i64", 8}};
}  // namespace

size_t dtype_size(DType t) { return kDTypes[static_cast<int>(t)].size; }
std::string_view dtype_name(DType t) { return kDTypes[static_cast<int>(t)].name; }
std::optional<DType> parse_dtype(std::string_view s) {
  for (const auto& d : kDTypes)
    if (s == d.name) return d.t;
  return std::nullopt;
}
std::vector<std::string> dtype_names() {
  std::vector<std::string> out;
  for (const auto& d : kDTypes) out.emplace_back(d.name);
  return out;
}

std::optional<int64_t> Shape::checked_numel() const {
  int64_t n = 1;
  for (int64_t d : dims_)
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return std::nullopt;
  return n;
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int64_t d : dims_) {
    bool overflow = __builtin_mul_overflow(n, d, &n);
    BRAID_ASSERT(!overflow, "element count of ", str(), " overflows int64");
  }
  return n;
}

std::string Shape::str() const {
  std::string s = "[";
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(dims_[i]);
  }
  return s + "]";
}

std::optional<int64_t> TensorDesc::checked_bytes() const {
  auto n = shape.checked_numel();
  int64_t b = 0;
  if (!n || __builtin_mul_overflow(*n, static_cast<int64_t>(dtype_size(dtype)), &b)) return std::nullopt;
  return b;
}

std::string TensorDesc::str() const { return std::string(dtype_name(dtype)) + shape.str(); }

Tensor Tensor::empty(const TensorDesc& desc) {
  size_t bytes = (desc.bytes() + 63) / 64 * 64;
  if (bytes == 0) bytes = 64;
  void* p = std::aligned_alloc(64, bytes);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, bytes);
  return Tensor(p, desc, std::shared_ptr<void>(p, [](void* q) { std::free(q); }));
}

Tensor Tensor::reshaped(const Shape& s) const {
  BRAID_ASSERT(s.numel() == numel(), "reshape ", shape().str(), " to ", s.str());
  Tensor t = *this;
  t.desc_.shape = s;
  return t;
}

Tensor Tensor::part(size_t byte_offset, const TensorDesc& desc) const {
  BRAID_ASSERT(defined() && byte_offset + desc.bytes() <= bytes(), "part of ", desc.bytes(), " bytes at ", byte_offset,
               " of ", desc_.str());
  return Tensor(static_cast<char*>(data_) + byte_offset, desc, owner_);
}

Tensor Tensor::clone() const {
  Tensor t = empty(desc_);
  if (bytes()) std::memcpy(t.data_, data_, bytes());
  return t;
}

void Tensor::zero() {
  if (bytes()) std::memset(data_, 0, bytes());
}

void Tensor::copy_from(const Tensor& other) {
  BRAID_ASSERT(other.desc() == desc_, other.desc().str(), " into ", desc_.str());
  if (bytes() && data_ != other.data_) std::memcpy(data_, other.data_, bytes());
}

double get_as_double(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::f32: return t.data<float>()[i];
    case DType::f64: return t.data<double>()[i];
    case DType::i32: return t.data<int32_t>()[i];
    case DType::i64: return static_cast<double>(t.data<int64_t>()[i]);
    default: BRAID_ASSERT(false, "get_as_double on ", dtype_name(t.dtype()));
  }
  return 0;
}

void set_from_double(const Tensor& t, int64_t i, double v) {
  switch (t.dtype()) {
    case DType::f32: t.data<float>()[i] = static_cast<float>(v); break;
    case DType::f64: t.data<double>()[i] = v; break;
    case DType::i32: t.data<int32_t>()[i] = static_cast<int32_t>(v); break;
    case DType::i64: t.data<int64_t>()[i] = static_cast<int64_t>(v); break;
    default: BRAID_ASSERT(false, "set_from_double on ", dtype_name(t.dtype()));
  }
}

}  // namespace braid

namespace braid {
namespace {

float load_f(DType t, const void* p, int64_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(p)[i];
    case DType::bf16: return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::f16: return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    default: BRAID_ASSERT(false, "load_f on ", dtype_name(t));
  }
  return 0;
}

}  // namespace

void convert_float(const Tensor& from, const Tensor& to) {
  BRAID_ASSERT(from.shape() == to.shape() && is_float(from.dtype()) && is_float(to.dtype()), "convert_float ",
               from.desc().str(), " into ", to.desc().str());
  const int64_t n = from.numel();
  if (from.dtype() == to.dtype()) {
    Tensor(to).copy_from(from);  // a view of the same memory
    return;
  }
  if (from.dtype() == DType::f64) {  // f64 -> f32 -> 16-bit would round twice; only f64 -> f32 is needed
    BRAID_ASSERT(to.dtype() == DType::f32, "convert_float f64 into ", dtype_name(to.dtype()));
    for (int64_t i = 0; i < n; ++i) to.data<float>()[i] = static_cast<float>(from.data<double>()[i]);
    return;
  }
  if (to.dtype() == DType::f64) {
    for (int64_t i = 0; i < n; ++i) to.data<double>()[i] = load_f(from.dtype(), from.raw(), i);
    return;
  }
  auto* out = to.raw();
  switch (to.dtype()) {
    case DType::f32:
      for (int64_t i = 0; i < n; ++i) static_cast<float*>(out)[i] = load_f(from.dtype(), from.raw(), i);
      break;
    case DType::bf16:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(out)[i] = f32_to_bf16(load_f(from.dtype(), from.raw(), i));
      break;
    case DType::f16:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(out)[i] = f32_to_f16(load_f(from.dtype(), from.raw(), i));
      break;
    default: BRAID_ASSERT(false, "convert_float into ", dtype_name(to.dtype()));
  }
}

}  // namespace braid
