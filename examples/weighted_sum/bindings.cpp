// flashpp.examples._weighted_sum: the kernels of weighted_sum.hpp for Python, taking DLPack
// arrays (torch, numpy, ...) in place and a CUDA stream as an int. Checks what the kernels
// assume (float32, shapes, contiguous rows, one device) and raises ValueError/TypeError.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "weighted_sum.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

using In = nb::ndarray<nb::ro>;
using Out = nb::ndarray<>;

constexpr int kDLPackCpu = 1;
constexpr int kDLPackCuda = 2;

template <typename A>
void check_float32(const A& a, const char* name) {
  if (a.dtype() != nb::dtype<float>()) {
    throw nb::type_error((std::string("weighted_sum: ") + name + ": expected float32").c_str());
  }
}

template <typename A>
void check_shape(const A& a, const char* name, std::size_t ndim, std::int64_t d0,
                 std::int64_t d1 = -1) {
  const bool ok = a.ndim() == ndim && static_cast<std::int64_t>(a.shape(0)) == d0 &&
                  (ndim < 2 || static_cast<std::int64_t>(a.shape(1)) == d1);
  // Vectors and rows must be contiguous along their last dimension.
  const bool dense = a.shape(ndim - 1) <= 1 || a.stride(ndim - 1) == 1;
  if (!ok || !dense) {
    throw nb::value_error((std::string("weighted_sum: ") + name +
                           ": wrong shape or a non-contiguous last dimension")
                              .c_str());
  }
}

template <typename A, typename B>
void check_same_device(const A& a, const B& b, const char* name) {
  if (a.device_type() != b.device_type() || a.device_id() != b.device_id()) {
    throw nb::value_error((std::string("weighted_sum: ") + name + ": not on x's device").c_str());
  }
}

bool on_cuda(const In& x) {
  if (x.device_type() == kDLPackCuda) return true;
  if (x.device_type() == kDLPackCpu) return false;
  throw nb::value_error("weighted_sum: x: expected a CPU or CUDA tensor");
}

weighted_sum::Rows rows_of(const In& x, std::int64_t grad_x_row_stride = 0) {
  weighted_sum::Rows s;
  s.rows = static_cast<std::int64_t>(x.shape(0));
  s.dim = static_cast<std::int64_t>(x.shape(1));
  s.x_row_stride = x.stride(0);
  s.grad_x_row_stride = grad_x_row_stride;
  return s;
}

void forward(const In& x, const In& w, const Out& y, std::uintptr_t stream) {
  check_float32(x, "x"), check_float32(w, "w"), check_float32(y, "y");
  const std::int64_t R = x.ndim() == 2 ? static_cast<std::int64_t>(x.shape(0)) : -1;
  const std::int64_t D = x.ndim() == 2 ? static_cast<std::int64_t>(x.shape(1)) : -1;
  check_shape(x, "x", 2, R, D), check_shape(w, "w", 1, D), check_shape(y, "y", 1, R);
  check_same_device(x, w, "w"), check_same_device(x, y, "y");
  const auto s = rows_of(x);
  const auto* xp = static_cast<const float*>(x.data());
  const auto* wp = static_cast<const float*>(w.data());
  auto* yp = static_cast<float*>(y.data());
  nb::gil_scoped_release no_gil;
  if (on_cuda(x)) {
#ifdef WEIGHTED_SUM_WITH_CUDA
    weighted_sum::forward_cuda(s, xp, wp, yp, reinterpret_cast<void*>(stream));
#else
    throw std::runtime_error("weighted_sum: built without CUDA");
#endif
  } else {
    weighted_sum::forward_cpu(s, xp, wp, yp);
  }
}

void backward(const In& x, const In& w, const In& grad_y, const Out& grad_x,
              const Out& grad_w_partial, std::uintptr_t stream) {
  for (auto [a, name] : {std::pair{&x, "x"}, std::pair{&w, "w"}, std::pair{&grad_y, "grad_y"}}) {
    check_float32(*a, name);
  }
  check_float32(grad_x, "grad_x"), check_float32(grad_w_partial, "grad_w_partial");
  const std::int64_t R = x.ndim() == 2 ? static_cast<std::int64_t>(x.shape(0)) : -1;
  const std::int64_t D = x.ndim() == 2 ? static_cast<std::int64_t>(x.shape(1)) : -1;
  check_shape(x, "x", 2, R, D), check_shape(w, "w", 1, D), check_shape(grad_y, "grad_y", 1, R);
  check_shape(grad_x, "grad_x", 2, R, D);
  check_shape(grad_w_partial, "grad_w_partial", 2, weighted_sum::num_row_blocks(R), D);
  if (D > 1 && grad_w_partial.stride(0) != D) {
    throw nb::value_error("weighted_sum: grad_w_partial: expected a contiguous array");
  }
  check_same_device(x, w, "w"), check_same_device(x, grad_y, "grad_y");
  check_same_device(x, grad_x, "grad_x"), check_same_device(x, grad_w_partial, "grad_w_partial");
  const auto s = rows_of(x, grad_x.stride(0));
  const auto* xp = static_cast<const float*>(x.data());
  const auto* wp = static_cast<const float*>(w.data());
  const auto* gyp = static_cast<const float*>(grad_y.data());
  auto* gxp = static_cast<float*>(grad_x.data());
  auto* gwp = static_cast<float*>(grad_w_partial.data());
  nb::gil_scoped_release no_gil;
  if (on_cuda(x)) {
#ifdef WEIGHTED_SUM_WITH_CUDA
    weighted_sum::backward_cuda(s, xp, wp, gyp, gxp, gwp, reinterpret_cast<void*>(stream));
#else
    throw std::runtime_error("weighted_sum: built without CUDA");
#endif
  } else {
    weighted_sum::backward_cpu(s, xp, wp, gyp, gxp, gwp);
  }
}

}  // namespace

NB_MODULE(_weighted_sum, m) {
  m.doc() = "Kernels of the weighted-sum example (examples/weighted_sum)";
  m.attr("ROWS_PER_BLOCK") = weighted_sum::kRowsPerBlock;
  m.def("forward", &forward, "x"_a, "w"_a, "y"_a, "stream"_a = 0,
        "y[r] = sum_d x[r, d] * w[d]; x: float32 [R, D], w: [D], y: [R] (written).");
  m.def("backward", &backward, "x"_a, "w"_a, "grad_y"_a, "grad_x"_a, "grad_w_partial"_a,
        "stream"_a = 0,
        "grad_x = grad_y ⊗ w; grad_w_partial[b] = sum over block b's rows of grad_y[r] x[r]\n"
        "(blocks of ROWS_PER_BLOCK rows); grad_w is grad_w_partial.sum(0).");
}
