// 64-bit index math: tensors whose second batch lies more than 2^31 elements (4 GiB of f16,
// 8 GiB of lse) past the first. The views live in sparse anonymous mappings (MAP_NORESERVE):
// only the pages actually addressed are ever backed by memory, so the test needs a few MiB.
// A kernel that computes an offset in 32 bits reads or writes the wrong place (or faults), and
// its results then differ from the same problem stored compactly.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdint>
#include <limits>

#include "common/attention_case.hpp"
#include "common/metrics.hpp"
#include "api/problem.hpp"
#include "cpu/element_access.hpp"

namespace flashpp::test {
namespace {

constexpr std::int64_t kFar = (std::int64_t(1) << 31) + 4096;  // batch stride, in elements

// A sparse, zero-filled, lazily backed region of `bytes` bytes.
class SparseRegion {
 public:
  explicit SparseRegion(std::size_t bytes) : bytes_(bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    data_ = p == MAP_FAILED ? nullptr : p;
  }
  ~SparseRegion() {
    if (data_) munmap(data_, bytes_);
  }
  SparseRegion(const SparseRegion&) = delete;
  SparseRegion& operator=(const SparseRegion&) = delete;
  void* data() const { return data_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_;
};

// A [B, N, H, D] view at element `base` of `region` with batch stride kFar.
TensorView far_view(const SparseRegion& region, DType dtype, std::int64_t base,
                    const HostTensor& like) {
  TensorView v = like.view();
  v.data = static_cast<char*>(region.data()) + base * static_cast<std::int64_t>(element_size(dtype));
  const std::int64_t H = like.size(2), D = like.size(3);
  v.strides[0] = kFar;
  v.strides[1] = H * D;
  v.strides[2] = D;
  v.strides[3] = 1;
  return v;
}

void copy_into(const HostTensor& from, const TensorView& to) {
  for (std::int64_t b = 0; b < from.size(0); ++b)
    for (std::int64_t n = 0; n < from.size(1); ++n)
      for (std::int64_t h = 0; h < from.size(2); ++h)
        for (std::int64_t d = 0; d < from.size(3); ++d)
          detail::store_element(to, detail::offset4(to, b, n, h, d), from.get(b, n, h, d));
}

// Reads a far view back into a compact HostTensor shaped like `like`.
HostTensor copy_out(const TensorView& from, const HostTensor& like) {
  HostTensor t = like.like();
  for (std::int64_t b = 0; b < like.size(0); ++b)
    for (std::int64_t n = 0; n < like.size(1); ++n)
      for (std::int64_t h = 0; h < like.size(2); ++h)
        for (std::int64_t d = 0; d < like.size(3); ++d)
          t.set(b, n, h, d, detail::load_element(from, detail::offset4(from, b, n, h, d)));
  return t;
}

TEST(LargeOffsets, BatchBeyond2Pow31ElementsMatchesCompactStorage) {
  AttentionCase c;
  c.shape = {2, 33, 45, 2, 1, 64};
  c.dtype = DType::f16;
  c.options.causal = true;
  c.options.dropout_p = 0.1f;
  c.options.seed = 3;
  const AttentionInputs in = make_inputs(c);

  // Tensors side by side inside each batch block; 64K elements apart is plenty.
  constexpr std::int64_t kSlot = 1 << 16;
  SparseRegion data(static_cast<std::size_t>(kFar + 8 * kSlot) * 2);
  SparseRegion lse_region(static_cast<std::size_t>(kFar + kSlot) * 4);
  if (!data.data() || !lse_region.data()) GTEST_SKIP() << "cannot map a sparse 12 GiB region";

  const TensorView q = far_view(data, c.dtype, 0 * kSlot, in.q);
  const TensorView k = far_view(data, c.dtype, 1 * kSlot, in.k);
  const TensorView v = far_view(data, c.dtype, 2 * kSlot, in.v);
  const TensorView o = far_view(data, c.dtype, 3 * kSlot, in.q);
  const TensorView dout = far_view(data, c.dtype, 4 * kSlot, in.q);
  const TensorView dq = far_view(data, c.dtype, 5 * kSlot, in.q);
  const TensorView dk = far_view(data, c.dtype, 6 * kSlot, in.k);
  const TensorView dv = far_view(data, c.dtype, 7 * kSlot, in.k);
  TensorView lse = make_lse(static_cast<float*>(lse_region.data()), 2, 2, 33);
  lse.strides[0] = kFar;
  copy_into(in.q, q);
  copy_into(in.k, k);
  copy_into(in.v, v);
  copy_into(in.dout, dout);

  Options options = c.options;
  options.backend = Backend::cpu;
  ASSERT_NO_THROW(flashpp::forward(q, k, v, o, lse, options));
  ASSERT_NO_THROW(flashpp::backward(q, k, v, o, lse, dout, dq, dk, dv, options));

  const ForwardOutputs ref_fwd = run_forward(in, c.options, Backend::cpu);
  const Gradients ref_grad = run_backward(in, ref_fwd, c.options, Backend::cpu);
  EXPECT_LE(relative_error(copy_out(o, in.q), ref_fwd.o), 1e-6);
  EXPECT_LE(relative_error(copy_out(dq, in.q), ref_grad.dq), 1e-6);
  EXPECT_LE(relative_error(copy_out(dk, in.k), ref_grad.dk), 1e-6);
  EXPECT_LE(relative_error(copy_out(dv, in.k), ref_grad.dv), 1e-6);
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t h = 0; h < 2; ++h)
      for (std::int64_t n = 0; n < 33; ++n)
        ASSERT_EQ(static_cast<const float*>(lse.data)[detail::offset3(lse, b, h, n)],
                  static_cast<float>(ref_fwd.lse.get(b, h, n)))
            << "lse [" << b << ", " << h << ", " << n << "]";
}

}  // namespace
}  // namespace flashpp::test
