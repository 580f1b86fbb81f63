// The sm90 family's forward entry: picks the instantiation for (dtype, head dim), rounding a head
// dim up to the next one of Sm90ForwardHeadDims (instances.hpp; the copy engine zero-fills the
// extra columns, they are never stored).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "../../common/check_cuda.hpp"
#include "../../families.hpp"
#include "../../instances.hpp"
#include "split_plan.hpp"
#include "tile_config.hpp"

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

// The split walk's workspace (split_walk.hpp) for a call that will take it: a D=128 tile
// (kSplitWalk; the one forward_tile_shape chooses, where the long-keys tile has no split walk),
// one block per SM (their shared memory allows no second), on the device's SMs.
// launch_forward_tiles sizes the same plan for its grid and keeps the stride walk where the
// workspace it gets is smaller.
std::size_t forward_split_workspace_bytes(const detail::Problem& pr) {
  if ((pr.dtype != DType::f16 && pr.dtype != DType::bf16) ||
      Sm90ForwardHeadDims::round_up(static_cast<int>(pr.D)) != 128 || !split_walk_call(pr)) {
    return 0;
  }
  const std::int64_t blocks = persistent_blocks(device_sm_count(pr.device.index));
  auto bytes = [&](auto config) {
    using Config = decltype(config);
    const SplitWalkPlan plan =
        split_walk_plan(pr.Nq, pr.Nk, pr.B * pr.Hq, pr.Hq / pr.Hkv, 64 * Config::consumers,
                        Config::block_n, 2 * 128 * 2, blocks, device_l2_bytes(pr.device.index));
    return plan.splits() ? split_workspace_bytes(blocks, Config::consumers, 128 / 8) : 0;
  };
  switch (forward_tile_shape<128>(pr, pr.Nq, pr.Nk, pr.B * pr.Hq, pr.device.index)) {
    case ForwardTileShape::long_keys:
      return 0;  // it walks by stride only
    case ForwardTileShape::tall:
      return bytes(ForwardTallTileConfig<128>{});
    case ForwardTileShape::two_warpgroups:
      break;
  }
  return bytes(ForwardTileConfig<128>{});
}

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
