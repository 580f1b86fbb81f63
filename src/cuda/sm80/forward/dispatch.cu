// The sm80 family's forward entry: picks the instantiation for (dtype, head dim), rounding a head
// dim up to the next one of Sm80ForwardHeadDims (instances.hpp; the extra columns are zero-filled
// in shared memory and never stored).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "../../families.hpp"
#include "../../instances.hpp"

namespace flashpp::cuda {
namespace sm80 {

template <typename Element, int kHeadDim>
void launch_forward(const ForwardParams& params, std::int64_t batch_heads, cudaStream_t stream);

namespace {

template <typename Element>
void launch_for_head_dim(int head_dim, const ForwardParams& params, std::int64_t batch_heads,
                         cudaStream_t stream) {
  const bool launched = Sm80ForwardHeadDims::dispatch(head_dim, [&](auto kHeadDim) {
    launch_forward<Element, decltype(kHeadDim)::value>(params, batch_heads, stream);
  });
  if (!launched) {
    throw Error(ErrorCode::internal, "sm80 forward: no instantiation for this head dim");
  }
}

}  // namespace

void run_forward(const ForwardParams& params, const detail::Problem& p, cudaStream_t stream) {
  const int head_dim = Sm80ForwardHeadDims::round_up(p.D);
  const std::int64_t batch_heads = p.B * p.Hq;
  if (p.dtype == DType::f16) {
    launch_for_head_dim<__half>(head_dim, params, batch_heads, stream);
  } else {
    launch_for_head_dim<__nv_bfloat16>(head_dim, params, batch_heads, stream);
  }
}

}  // namespace sm80
}  // namespace flashpp::cuda
