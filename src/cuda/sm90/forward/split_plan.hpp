// The sm90 forward's grid plans that the host needs outside a kernel launch: the persistent grid's
// block count, the choice of the tall tile and the split walk's plan (split_walk.hpp), shared by
// launch.cuh (which launches the kernels) and dispatch.cu (the workspace query,
// forward_split_workspace_bytes), so that dispatch.cu does not include the kernels: with
// launch.cuh it compiled every sm90 forward kernel a second time beside the instance files
// (instances.cmake), and its copies were the ones linked.
// Host code only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>

#include "../../common/check_cuda.hpp"
#include "../../common/env_switch.hpp"
#include "split_walk.hpp"
#include "tile_config.hpp"
#include "tile_rounds.hpp"

namespace flashpp::cuda::sm90 {

// FLASHPP_SM90_FWD_PERSISTENT=0 / =1: one block per item / a persistent grid for every call
// (launch.cuh, walk_grid); -1 when unset. Read at every call.
inline int persistent_forced() { return env_switch("FLASHPP_SM90_FWD_PERSISTENT"); }

// Blocks of a persistent grid: as many as fit on the GPU at once, or fewer where
// FLASHPP_SM90_FWD_MAX_BLOCKS=N (tests: small shapes whose blocks walk many items).
inline std::int64_t persistent_blocks(std::int64_t resident) {
  const char* env = std::getenv("FLASHPP_SM90_FWD_MAX_BLOCKS");
  const std::int64_t cap = env != nullptr ? std::atoll(env) : 0;
  const std::int64_t blocks = cap > 0 && cap < resident ? cap : resident;
  return blocks > 0 ? blocks : 1;
}

// When the split walk is worth its costs (session 30 run 3, H100, bf16, D=128, B=4 H=32,
// gpu_compare 20 rounds, against the stride walk): with 32 key tiles an item and more (N 4096,
// 8192, 16384) +1.9..+2.0%, and the split kernel walking whole items only measured as the stride
// kernel; with 16 (N=2048) -1.3%, with 8 (N=1024) -9%, where the split kernel lost 6.7% walking
// whole items only (a cost per item that long items hide) and the cuts 2.5% more. So: items of
// at least kSplitMinKeyTiles key tiles, and a gain of at least kSplitMinGainSteps key-tile steps
// a block (the idle steps of the last round, (G - I mod G) T / G). And (run 9, Nq=2000 Nk=9000
// B=2 H=32: -3..-4%) the split part's items, which all run at once, must not read more K and V
// than half the L2 holds: there they span 14.5 heads of 4.6 MB (67 MB, against 8.8 MB at B=4 H=32
// N=4096, 8192 or 16384, which gain), where the stride walk's round spans 8 heads.
inline constexpr std::int64_t kSplitMinKeyTiles = 32;
inline constexpr std::int64_t kSplitMinGainSteps = 4;

// Bytes of K and V that the split part of a plan reads: the kv heads of its items (items
// [whole_items, items) in launch order, head by head: block_item without a mask) times one
// head's K and V (`kv_head_bytes`).
inline std::int64_t split_kv_bytes(const SplitWalkPlan& plan, std::int64_t items,
                                   std::int64_t q_tiles, std::int64_t heads_per_kv,
                                   std::int64_t kv_head_bytes) {
  const std::int64_t first = plan.whole_items / q_tiles, last = (items - 1) / q_tiles;
  const std::int64_t kv_heads = last / heads_per_kv - first / heads_per_kv + 1;
  return kv_heads * kv_head_bytes;
}

// An attribute of `device` (asked once per device, the first 64 devices; -1: the current device).
template <cudaDeviceAttr kAttribute>
inline std::int64_t cached_device_attribute(int device, const char* what) {
  static std::int64_t cache[64] = {};
  if (device < 0) check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  auto ask = [&] {
    int value = 0;
    check_cuda(cudaDeviceGetAttribute(&value, kAttribute, device), what);
    return value > 0 ? std::int64_t{value} : std::int64_t{1};
  };
  if (device >= 64) return ask();  // beyond the cache: asked every time, never another's slot
  std::int64_t& slot = cache[device];
  if (slot == 0) slot = ask();
  return slot;
}
// The L2 size of `device` and its SM count.
inline std::int64_t device_l2_bytes(int device = -1) {
  return cached_device_attribute<cudaDevAttrL2CacheSize>(device, "cudaDeviceGetAttribute (L2 size)");
}
inline std::int64_t device_sm_count(int device = -1) {
  return cached_device_attribute<cudaDevAttrMultiProcessorCount>(device,
                                                                 "cudaDeviceGetAttribute (SM count)");
}

// The split walk's plan for an unmasked call without softcap and dropout on the persistent grid
// of `blocks` blocks: none where it does not split or does not pay (above), or where the heads
// take several launches. `key_bytes`: bytes of one key's K and V rows (2 x padded D x element);
// `l2_bytes`: the device's L2. FLASHPP_SM90_FWD_SPLIT=0 turns it off, =1 takes it wherever the
// plan can cut (tests, A/B runs; read at every call).
inline SplitWalkPlan split_walk_plan(std::int64_t q_len, std::int64_t k_len,
                                     std::int64_t batch_heads, std::int64_t heads_per_kv,
                                     int block_m, int block_n, std::int64_t key_bytes,
                                     std::int64_t blocks, std::int64_t l2_bytes) {
  const int forced = env_switch("FLASHPP_SM90_FWD_SPLIT");
  if (batch_heads > 65535 || forced == 0) return {};
  const std::int64_t q_tiles = (q_len + block_m - 1) / block_m;
  const std::int64_t items = q_tiles * batch_heads;
  const std::int64_t tiles = (k_len + block_n - 1) / block_n;
  const SplitWalkPlan plan = plan_split_walk(items, tiles, blocks);
  if (forced == 1 || !plan.splits()) return plan;
  // The rule's tile counts are of 128-key tiles (the tile it was measured with); the tall D=128
  // tile's 64-key steps count half.
  const std::int64_t gain_steps = (blocks - items % blocks) * tiles / blocks * block_n / 128;
  const bool fits_l2 =
      2 * split_kv_bytes(plan, items, q_tiles, heads_per_kv, k_len * key_bytes) <= l2_bytes;
  return (k_len + 127) / 128 >= kSplitMinKeyTiles && gain_steps >= kSplitMinGainSteps && fits_l2
             ? plan
             : SplitWalkPlan{};
}

// Whether a call takes the head dim's tall tile (ForwardTallTileConfig: three consumer warpgroups,
// four at D=64) where it has one: calls without softcap and dropout (their kernel spills at 160
// registers), unmasked above the tile's unmasked_two_tile_rows query rows (tile_config.hpp: 0 at D
// 64 and 96, 1024 at D=128), masked above its masked_two_tile_rows (384 at D=64, 1024 at D 96 and
// 128). Measured at D=64, causal, against the two-warpgroup tile, on the 192-row tile: session 17
// N=16384 +10%, 4096 equal, 1024 -15%; since each warpgroup skips the key tiles its rows do not see
// and the part-empty tile comes first (session 29 run 3, H200, bf16): 1024 +1.1%, 2048 +10.5%;
// since the two-warpgroup tile's masked tiles use the mask words (session 32 runs 10-11, H100):
// 1024 -2.8..-4.1% (bf16, fp16), 1536 +12..+13%, 2048 +0.3..+7%. On the 256-row tile of session 44:
// tile_config.hpp. FLASHPP_SM90_FWD_TALL=0 / =1 forces it off / on for every call the tile can take
// (A/B runs and tests; read at every call). Unmasked calls also ask tall_rounds_pay (below). Call:
// a ForwardParams or a Problem (the workspace query), whose query length is q_len.
//
// Tile: the head dim's ForwardTallTileConfig (its row limits, and round_slack for
// tall_rounds_pay: negative where unmasked calls do not ask, D=64, whose tall tile gains 14-20%).
// `batch_heads` (B x Hq) and `device` (-1: the current one; its SMs give the persistent grid's
// blocks) for tall_rounds_pay, asked only where it decides.
template <typename Tile, typename Call>
inline bool use_tall_tile(const Call& call, std::int64_t q_len, std::int64_t batch_heads,
                          int device) {
  if (call.softcap > 0.0f || call.dropout.threshold != 0) return false;
  const int forced = env_switch("FLASHPP_SM90_FWD_TALL");
  if (forced >= 0) return forced == 1;
  if (call.mask.active()) return q_len > Tile::masked_two_tile_rows;
  if (q_len <= Tile::unmasked_two_tile_rows) return false;
  return Tile::round_slack < 0 ||
         tall_rounds_pay(q_len, batch_heads, persistent_blocks(device_sm_count(device)),
                         Tile::round_slack);
}

// Whether a call that takes the tall tile takes the head dim's long-keys tile instead
// (ForwardLongKeysTileConfig, 80-key tiles): unmasked calls without softcap and dropout over at
// least Tile::min_keys keys. FLASHPP_SM90_FWD_LONG=0 / =1 forces it off / on for every call the
// tile can take (A/B runs and tests; read at every call). Call: a ForwardParams or a Problem.
template <typename Tile, typename Call>
inline bool use_long_keys_tile(const Call& call, std::int64_t k_len) {
  if (call.mask.active() || call.softcap > 0.0f || call.dropout.threshold != 0) return false;
  const int forced = env_switch("FLASHPP_SM90_FWD_LONG");
  if (forced >= 0) return forced == 1;
  return k_len >= Tile::min_keys;
}

// The tile shape a call of head dim kHeadDim takes: the tall tile where use_tall_tile takes
// it, and of those calls the long-keys one where use_long_keys_tile does; else the two-warpgroup
// tile (ForwardTileConfig). The launch (launch.cuh) and the workspace query (dispatch.cu) both
// ask here. Call, q_len, batch_heads, device: as for use_tall_tile; k_len: the keys.
enum class ForwardTileShape { two_warpgroups, tall, long_keys };

template <int kHeadDim, typename Call>
inline ForwardTileShape forward_tile_shape(const Call& call, std::int64_t q_len,
                                           std::int64_t k_len, std::int64_t batch_heads,
                                           int device) {
  if constexpr (ForwardTallTileConfig<kHeadDim>::exists) {
    if (use_tall_tile<ForwardTallTileConfig<kHeadDim>>(call, q_len, batch_heads, device)) {
      if constexpr (ForwardLongKeysTileConfig<kHeadDim>::exists) {
        if (use_long_keys_tile<ForwardLongKeysTileConfig<kHeadDim>>(call, k_len)) {
          return ForwardTileShape::long_keys;
        }
      }
      return ForwardTileShape::tall;
    }
  }
  return ForwardTileShape::two_warpgroups;
}

// Whether a call can take the split walk at all (launch_forward_tiles and the workspace query,
// forward_split_workspace_bytes): no mask, softcap or dropout, and the persistent grid not
// switched off. Problem and ForwardParams both have these fields.
template <typename Call>
inline bool split_walk_call(const Call& call) {
  return !call.mask.active() && call.softcap == 0.0f && call.dropout.threshold == 0 &&
         persistent_forced() != 0;
}

}  // namespace flashpp::cuda::sm90
