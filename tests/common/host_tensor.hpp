// HostTensor: an owning host buffer plus the flashpp::TensorView that describes it, for tests.
//
// Attention tensors are [B, N, H, D] by meaning and can be stored in three layouts (all views
// keep the last stride 1, as the API requires):
//   bnhd    contiguous [B, N, H, D]                       (flash_attn's layout)
//   bhnd    contiguous [B, H, N, D], expressed by strides (torch SDPA's layout)
//   padded  [B, N, H, D] with gaps after every row, head and sequence, so a kernel that assumes
//           contiguity reads the wrong elements and one that writes out of bounds hits a gap.
// lse tensors are [B, H, N] float32 (float64 for the reference backend), contiguous or padded.
//
// Every buffer can be "poisoned" (filled with NaN, gaps included) before a call: an output
// element the call forgets to write stays NaN, and a write into a gap is detected by
// gaps_untouched(). Values are read and written as double through the storage dtype, so one
// HostTensor type serves f32, f16, bf16 and f64. GPU tests copy raw() to and from the device
// and view it with view(device).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flashpp/flashpp.hpp"

namespace flashpp::test {

enum class Layout { bnhd, bhnd, padded };
const char* to_string(Layout layout);

class HostTensor {
 public:
  HostTensor() = default;

  // A [B, N, H, D] attention tensor (q, k, v, o, dout and the gradients).
  static HostTensor attention(DType dtype, std::int64_t B, std::int64_t N, std::int64_t H,
                              std::int64_t D, Layout layout);
  // A [B, H, N] lse tensor; `layout` padded adds gaps, anything else is contiguous.
  static HostTensor lse(DType dtype, std::int64_t B, std::int64_t H, std::int64_t N,
                        Layout layout = Layout::bnhd);
  // A tensor of the same shape, dtype and layout, poisoned.
  HostTensor like() const;
  // A copy with the values converted to `dtype` (rounded to nearest even), same layout.
  HostTensor converted(DType dtype) const;

  // The view of this buffer. Sizes of zero give a null data pointer, as callers typically pass.
  TensorView view(Device device = {}) const;

  DType dtype() const { return dtype_; }
  Layout layout() const { return layout_; }
  int rank() const { return rank_; }
  std::int64_t size(int dim) const { return sizes_[dim]; }
  std::int64_t stride(int dim) const { return strides_[dim]; }
  std::int64_t numel() const;          // logical elements
  std::int64_t storage_elements() const { return storage_elements_; }  // gaps included
  void* raw() { return storage_.data(); }
  const void* raw() const { return storage_.data(); }
  std::size_t raw_bytes() const;

  // Element access by logical index (unused trailing indices are 0).
  double get(std::int64_t i0, std::int64_t i1, std::int64_t i2, std::int64_t i3 = 0) const;
  void set(std::int64_t i0, std::int64_t i1, std::int64_t i2, std::int64_t i3, double value);
  // All logical elements in row-major index order, as double.
  std::vector<double> values() const;
  // Sets the logical elements from a row-major list (size numel()).
  void set_values(const std::vector<double>& values);

  // Fills the logical elements with normal(0, stddev) samples from `seed`, rounded to the dtype.
  void fill_normal(std::uint64_t seed, double stddev = 1.0);
  void fill(double value);
  // Fills every storage element, gaps included, with NaN.
  void poison();
  // True when every gap element (storage not addressed by the view) still holds the poison NaN.
  bool gaps_untouched() const;

 private:
  std::int64_t offset(std::int64_t i0, std::int64_t i1, std::int64_t i2, std::int64_t i3) const;
  void allocate();

  DType dtype_ = DType::f32;
  Layout layout_ = Layout::bnhd;
  int rank_ = 0;
  std::int64_t sizes_[4] = {0, 0, 0, 0};
  std::int64_t strides_[4] = {0, 0, 0, 0};
  std::int64_t storage_elements_ = 0;
  std::vector<std::uint64_t> storage_;  // 8-byte words: aligned for every dtype
};

// "[2, 17, 4, 64] f16 bhnd"
std::string describe(const HostTensor& t);

}  // namespace flashpp::test
