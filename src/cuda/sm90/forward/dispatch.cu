// The sm90 family's forward entry: picks the instantiation for (dtype, head dim), rounding a head
// dim up to the next one of Sm90ForwardHeadDims (instances.hpp; the copy engine zero-fills the
// extra columns, they are never stored).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "../../families.hpp"
#include "../../instances.hpp"

namespace flashpp::cuda {
namespace sm90 {

template <typename Element, int kHeadDim>
void launch_forward(const ForwardParams& params, const detail::ForwardArgs& args,
                    cudaStream_t stream);

namespace {

template <typename Element>
void launch_for_head_dim(int head_dim, const ForwardParams& params,
                         const detail::ForwardArgs& args, cudaStream_t stream) {
  const bool launched = Sm90ForwardHeadDims::dispatch(head_dim, [&](auto kHeadDim) {
    launch_forward<Element, decltype(kHeadDim)::value>(params, args, stream);
  });
  if (!launched) {
    throw Error(ErrorCode::internal, "sm90 forward: no instantiation for this head dim");
  }
}

}  // namespace

void run_forward(const ForwardParams& params, const detail::ForwardArgs& args,
                 cudaStream_t stream) {
  const int head_dim = Sm90ForwardHeadDims::round_up(args.problem.D);
  if (args.problem.dtype == DType::f16) {
    launch_for_head_dim<__half>(head_dim, params, args, stream);
  } else {
    launch_for_head_dim<__nv_bfloat16>(head_dim, params, args, stream);
  }
}

}  // namespace sm90
}  // namespace flashpp::cuda
