// The sm80 family's backward entry: picks the instantiation for (dtype, kernel head dim) and
// launches its sequence on one stream
//   preprocess (delta, lse in log2 units; common/backward_pre_post.cu)
//   -> main kernel per key tile (dK, dV; dQ by atomics unless deterministic)
//   -> postprocess (dQ accumulator -> dq)     or, deterministic: dQ kernel per query tile
// The kernels' launchers are instantiated one (Element, kHeadDim) per file, for the kernel head
// dims of Sm80BackwardHeadDims (instances.hpp; the files are generated from instances.cmake).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

#include "../../common/backward_params.hpp"
#include "../../common/backward_pre_post.cuh"
#include "../../common/backward_workspace.hpp"
#include "../../families.hpp"
#include "../../instances.hpp"
#include "launch.hpp"

namespace flashpp::cuda::sm80 {
namespace {

template <typename Element, int kHeadDim>
void run_kernels(const BackwardParams& args_params, bool deterministic, cudaStream_t stream) {
  // The main kernel's launch choices (block order, bulk copies, the split of its last wave) come
  // first: the preprocess zeroes the split units' partial sums.
  const BackwardParams p = prepare_main<Element, kHeadDim>(args_params, deterministic);
  launch_preprocess<Element>(p, stream);
  if (deterministic) {
    launch_main<Element, kHeadDim>(p, /*accumulate_dq=*/false, stream);
    launch_dq<Element, kHeadDim>(p, stream);
    return;
  }
  // The dQ accumulator was zeroed by the preprocess (one pass instead of a separate memset).
  launch_main<Element, kHeadDim>(p, /*accumulate_dq=*/true, stream);
  launch_postprocess<Element>(p, stream);
}

template <typename Element>
void dispatch_head_dim(const BackwardParams& p, bool deterministic, cudaStream_t stream) {
  const int head_dim = kernel_head_dim(p.head_dim);
  const bool ran = Sm80BackwardHeadDims::dispatch(head_dim, [&](auto kHeadDim) {
    run_kernels<Element, decltype(kHeadDim)::value>(p, deterministic, stream);
  });
  if (!ran) {
    throw Error(ErrorCode::internal,
                "flashpp::backward: no CUDA kernel for head dim " + std::to_string(p.head_dim));
  }
}

}  // namespace

void run_backward(const BackwardParams& params, const detail::BackwardArgs& args,
                  cudaStream_t stream) {
  if (args.problem.dtype == DType::f16) {
    dispatch_head_dim<__half>(params, args.deterministic, stream);
  } else {
    dispatch_head_dim<__nv_bfloat16>(params, args.deterministic, stream);
  }
}

}  // namespace flashpp::cuda::sm80
