// The sm90 family's backward entry: picks the instantiation for (dtype, kernel head dim): one of
// Sm90BackwardHeadDims (instances.hpp), which the caller checked (backward_dispatch.cu).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "../../common/backward_workspace.hpp"
#include "../../common/backward_params.hpp"
#include "../../families.hpp"
#include "../../instances.hpp"

namespace flashpp::cuda::sm90 {

template <typename Element, int kHeadDim>
void run_backward_for(const BackwardParams& params, const detail::BackwardArgs& args,
                      cudaStream_t stream);

namespace {

template <typename Element>
void run_for_head_dim(const BackwardParams& params, const detail::BackwardArgs& args,
                      cudaStream_t stream) {
  const int head_dim = kernel_head_dim(params.head_dim);
  const bool ran = Sm90BackwardHeadDims::dispatch(head_dim, [&](auto kHeadDim) {
    run_backward_for<Element, decltype(kHeadDim)::value>(params, args, stream);
  });
  if (!ran) throw Error(ErrorCode::internal, "sm90 backward: no instantiation for this head dim");
}

}  // namespace

void run_backward(const BackwardParams& params, const detail::BackwardArgs& args,
                  cudaStream_t stream) {
  if (args.problem.dtype == DType::f16) {
    run_for_head_dim<__half>(params, args, stream);
  } else {
    run_for_head_dim<__nv_bfloat16>(params, args, stream);
  }
}

}  // namespace flashpp::cuda::sm90
