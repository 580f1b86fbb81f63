// The FP8 forward's entry: picks the instantiation for (output dtype, head dim), rounding a head
// dim up to the next one of Sm90Fp8ForwardHeadDims (instances.hpp: 64, 128, 256; the copy engine
// zero-fills the extra columns, they are never stored).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "../../families.hpp"
#include "../../instances.hpp"

namespace flashpp::cuda::sm90 {
namespace fp8 {

template <typename Out, int kHeadDim>
void launch_forward_fp8(const ForwardParams& params, const detail::ForwardArgs& args,
                        cudaStream_t stream);

namespace {

template <typename Out>
void launch_for_head_dim(int head_dim, const ForwardParams& params,
                         const detail::ForwardArgs& args, cudaStream_t stream) {
  const bool launched = Sm90Fp8ForwardHeadDims::dispatch(head_dim, [&](auto kHeadDim) {
    launch_forward_fp8<Out, decltype(kHeadDim)::value>(params, args, stream);
  });
  if (!launched) {
    throw Error(ErrorCode::internal, "sm90 FP8 forward: no instantiation for this head dim");
  }
}

}  // namespace
}  // namespace fp8

void run_forward_fp8(const ForwardParams& params, const detail::ForwardArgs& args,
                     cudaStream_t stream) {
  const int head_dim = Sm90Fp8ForwardHeadDims::round_up(args.problem.D);
  if (args.problem.out_dtype == DType::f16) {
    fp8::launch_for_head_dim<__half>(head_dim, params, args, stream);
  } else {
    fp8::launch_for_head_dim<__nv_bfloat16>(head_dim, params, args, stream);
  }
}

}  // namespace flashpp::cuda::sm90
