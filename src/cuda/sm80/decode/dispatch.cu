// Host side of the decode kernels: support checks, the split heuristic, workspace layout,
// parameters, and the (dtype, head dim) dispatch.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "../../../common/split_kv.hpp"
#include "../../common/check_cuda.hpp"
#include "../../common/poison.cuh"
#include "../../decode.hpp"
#include "../../instances.hpp"
#include "kernel.cuh"

namespace flashpp::cuda {
namespace decode {

// Writes k_new/v_new into the cache at the sequences' lengths: one thread per 16-byte chunk.
// Lengths are clamped and out-of-range pages skipped, so nothing is written out of bounds.
__global__ void __launch_bounds__(256) decode_append_kernel(const AppendParams p) {
  const int chunks = p.D / 8;
  const std::int64_t total = static_cast<std::int64_t>(p.B) * p.Nnew * p.Hkv * chunks;
  const std::int64_t idx = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= total) return;
  const int chunk = static_cast<int>(idx % chunks);
  std::int64_t rest = idx / chunks;
  const int h = static_cast<int>(rest % p.Hkv);
  rest /= p.Hkv;
  const int tn = static_cast<int>(rest % p.Nnew);
  const int b = static_cast<int>(rest / p.Nnew);
  int cached = p.seqlens[b * p.seqlens_stride];
  cached = min(max(cached, 0), p.capacity - p.Nnew);
  const int pos = cached + tn;
  std::int64_t page = b, row = pos;
  if (p.block_table != nullptr) {
    page = p.block_table[b * p.table_stride[0] + (pos / p.page_size) * p.table_stride[1]];
    if (page < 0 || page >= p.num_pages) return;
    row = pos % p.page_size;
  }
  const auto* kn = static_cast<const std::uint16_t*>(p.k_new) + b * p.k_new_stride[0] +
                   tn * p.k_new_stride[1] + h * p.k_new_stride[2] + chunk * 8;
  const auto* vn = static_cast<const std::uint16_t*>(p.v_new) + b * p.v_new_stride[0] +
                   tn * p.v_new_stride[1] + h * p.v_new_stride[2] + chunk * 8;
  auto* kd = static_cast<std::uint16_t*>(p.k) + page * p.k_stride[0] + row * p.k_stride[1] +
             h * p.k_stride[2] + chunk * 8;
  auto* vd = static_cast<std::uint16_t*>(p.v) + page * p.v_stride[0] + row * p.v_stride[1] +
             h * p.v_stride[2] + chunk * 8;
  *reinterpret_cast<uint4*>(kd) = *reinterpret_cast<const uint4*>(kn);
  *reinterpret_cast<uint4*>(vd) = *reinterpret_cast<const uint4*>(vn);
}

}  // namespace decode

namespace {

using detail::KvCacheArgs;

bool aligned_view(const TensorView& t) {
  if (reinterpret_cast<std::uintptr_t>(t.data) % 16 != 0) return false;
  for (int i = 0; i < t.rank - 1; ++i) {
    if (t.sizes[i] > 1 && t.strides[i] % 8 != 0) return false;
  }
  return true;
}

// D: one of Sm80DecodeHeadDims (decode_unsupported_reason checked it).
int smem_bytes_for(std::int64_t D) {
  int bytes = 0;
  Sm80DecodeHeadDims::dispatch(D, [&](auto kHeadDim) {
    bytes = decode::DecodeConfig<decltype(kHeadDim)::value>::kSmemBytes;
  });
  return bytes;
}

// SMs, shared memory per SM and compute capability of `device`, asked once per device.
struct DeviceShape {
  int sms = 0;
  int smem_per_sm = 0;
  int major = 0;
};
DeviceShape device_shape(int device) {
  static DeviceShape cache[64];
  if (device < 0 || device >= 64) device = 0;
  DeviceShape& s = cache[device];
  if (s.sms == 0) {
    int sms = 0, smem = 0, major = 0;
    check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
               "cudaDeviceGetAttribute (multiprocessors)");
    check_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
               "cudaDeviceGetAttribute (compute capability)");
    s.major = major;
    check_cuda(cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device),
               "cudaDeviceGetAttribute (shared memory per multiprocessor)");
    s.smem_per_sm = smem;
    s.sms = sms;
  }
  return s;
}

// The partials start at a 256-byte boundary inside the workspace (the combine reads float4s).
constexpr std::size_t kWorkspaceAlignment = 256;

int m_tiles_of(const KvCacheArgs& a) {
  const std::int64_t rows = a.problem.heads_per_kv() * a.problem.Nq;
  return static_cast<int>((rows + 15) / 16);
}

// The decode variant, read at every call so that one process can time both (tools/decode_bench.py
// --ab): FLASHPP_DECODE_VARIANT unset, "" or "default": split count from choose_num_splits_v2,
// the combine kernel with one block per row, launched as a programmatic dependent on sm90;
// "legacy": the split count, combine kernel and plain launch this library had before.
// FLASHPP_DECODE_SPLITS=n (1..128) forces the split count (either variant; for tests and sweeps).
bool legacy_variant() {
  const char* env = std::getenv("FLASHPP_DECODE_VARIANT");
  const std::string v = env != nullptr ? env : "";
  if (v.empty() || v == "default") return false;
  if (v == "legacy") return true;
  throw Error(ErrorCode::invalid_argument,
              "FLASHPP_DECODE_VARIANT: expected default or legacy, got '" + v + "'");
}

int forced_splits() {
  const char* env = std::getenv("FLASHPP_DECODE_SPLITS");
  if (env == nullptr || *env == '\0') return 0;
  char* end = nullptr;
  const long n = std::strtol(env, &end, 10);
  if (*end != '\0' || n < 1 || n > decode::kMaxSplits) {
    throw Error(ErrorCode::invalid_argument,
                std::string("FLASHPP_DECODE_SPLITS: expected an integer in [1, ") +
                    std::to_string(decode::kMaxSplits) + "], got '" + env + "'");
  }
  return static_cast<int>(n);
}

// Splits depend on the shapes and the device only (not on the lengths, which may live on the
// device), so the workspace size is known before the call.
int heuristic_splits(const KvCacheArgs& a, bool legacy) {
  const DeviceShape dev = device_shape(a.problem.device.index);
  detail::SplitKvInput in;
  in.work_units = a.problem.B * a.problem.Hkv * m_tiles_of(a);
  in.key_tiles = (a.page_size * a.max_pages + decode::kTileKeys - 1) / decode::kTileKeys;
  in.sm_count = dev.sms;
  const int per_block = smem_bytes_for(a.problem.D) + 1024;
  in.blocks_per_sm = dev.smem_per_sm / per_block > 0 ? dev.smem_per_sm / per_block : 1;
  if (in.blocks_per_sm > 4) in.blocks_per_sm = 4;
  in.max_splits = decode::kMaxSplits;
  if (legacy) {
    in.min_tiles_per_split = 8;
    return detail::choose_num_splits(in);
  }
  in.min_tiles_per_split = decode::kWarps;  // a tile per warp
  return detail::choose_num_splits_v2(in);
}

// The split count of this call.
int choose_splits(const KvCacheArgs& a) {
  if (const int forced = forced_splits(); forced > 0) return forced;
  return heuristic_splits(a, legacy_variant());
}

// The split count the workspace is sized for: enough for either variant, so that switching
// FLASHPP_DECODE_VARIANT between calls never finds a workspace sized (or a size cached, as the
// Python wrapper does per shape) for the other one too small. A forced count sizes it exactly.
int workspace_splits(const KvCacheArgs& a) {
  if (const int forced = forced_splits(); forced > 0) return forced;
  legacy_variant();  // refuse a bad value here already
  return std::max(heuristic_splits(a, true), heuristic_splits(a, false));
}

template <typename Element>
void dispatch_head_dim(std::int64_t D, const decode::DecodeParams& p, cudaStream_t stream) {
  const bool launched = Sm80DecodeHeadDims::dispatch(D, [&](auto kHeadDim) {
    decode::launch_decode<Element, decltype(kHeadDim)::value>(p, stream);
  });
  if (!launched) {
    throw Error(ErrorCode::internal, "flashpp::forward_kvcache: no decode kernel for D");
  }
}

void copy_strides(std::int64_t (&dst)[3], const TensorView& t) {
  for (int i = 0; i < 3; ++i) dst[i] = t.strides[i];
}

// The cache's addressing (K/V views, lengths, block table, page geometry), which the append and
// the decode kernels' parameters both carry under the same names.
template <typename Params>
void fill_cache_addressing(Params& p, const KvCacheArgs& a) {
  p.k = a.k_cache.data;
  p.v = a.v_cache.data;
  copy_strides(p.k_stride, a.k_cache);
  copy_strides(p.v_stride, a.v_cache);
  p.seqlens = static_cast<const std::int32_t*>(a.cache_seqlens.data);
  p.seqlens_stride = a.cache_seqlens.strides[0];
  if (a.paged) {
    p.block_table = static_cast<const std::int32_t*>(a.block_table.data);
    p.table_stride[0] = a.block_table.strides[0];
    p.table_stride[1] = a.block_table.strides[1];
  }
  p.page_size = static_cast<int>(a.page_size);
  p.num_pages = static_cast<int>(a.num_pages);
  p.capacity = static_cast<int>(a.page_size * a.max_pages);
}

}  // namespace

std::string decode_unsupported_reason(const KvCacheArgs& a) {
  const std::int64_t D = a.problem.D;
  if (!Sm80DecodeHeadDims::contains(D)) {
    return "q: the CUDA decode kernels support head dims " + Sm80DecodeHeadDims::text() + ", got " +
           std::to_string(D);
  }
  if (a.paged && a.page_size % 16 != 0) {
    return "k_cache: the CUDA decode kernels need a page size that is a multiple of 16, got " +
           std::to_string(a.page_size);
  }
  const std::pair<const char*, const TensorView*> views[] = {
      {"k_cache", &a.k_cache}, {"v_cache", &a.v_cache}, {"k_new", &a.k_new}, {"v_new", &a.v_new}};
  for (const auto& [name, t] : views) {
    if (t->data != nullptr && !aligned_view(*t)) {
      return std::string(name) +
             ": the CUDA decode kernels need 16-byte aligned data and strides that are "
             "multiples of 8 elements";
    }
  }
  const std::int64_t capacity = a.page_size * a.max_pages;
  if (capacity >= (std::int64_t(1) << 31) || a.num_pages >= (std::int64_t(1) << 31) ||
      a.problem.Nq * a.problem.heads_per_kv() >= (std::int64_t(1) << 31) ||
      a.problem.B >= 65536 || a.problem.Hkv * m_tiles_of(a) >= 65536) {
    return "k_cache: the CUDA decode kernels need capacity, pages and rows below 2^31, B and "
           "Hkv x ceil(Hq/Hkv x Nq / 16) below 65536";
  }
  return {};
}

std::size_t decode_workspace_bytes(const KvCacheArgs& a) {
  if (a.problem.B == 0 || a.problem.Nq == 0 || a.problem.Hq == 0) return 0;
  const int splits = workspace_splits(a);
  if (splits <= 1) return 0;
  const std::size_t rows = static_cast<std::size_t>(splits) * a.problem.B * a.problem.Hq *
                           a.problem.Nq;
  const std::size_t o_bytes = (rows * a.problem.D * 4 + 255) / 256 * 256;
  return kWorkspaceAlignment + o_bytes + rows * 4;  // room to align the caller's pointer
}

void run_decode(const KvCacheArgs& a) {
  const detail::Problem& pr = a.problem;
  const auto stream = static_cast<cudaStream_t>(a.stream);
  if (a.Nnew > 0) {
    decode::AppendParams ap;
    ap.k_new = a.k_new.data;
    ap.v_new = a.v_new.data;
    copy_strides(ap.k_new_stride, a.k_new);
    copy_strides(ap.v_new_stride, a.v_new);
    fill_cache_addressing(ap, a);
    ap.B = static_cast<int>(pr.B);
    ap.Nnew = static_cast<int>(a.Nnew);
    ap.Hkv = static_cast<int>(pr.Hkv);
    ap.D = static_cast<int>(pr.D);
    const std::int64_t chunks = pr.B * a.Nnew * pr.Hkv * (pr.D / 8);
    if (chunks > 0) {
      decode::decode_append_kernel<<<static_cast<unsigned>((chunks + 255) / 256), 256, 0,
                                     stream>>>(ap);
      check_launch("decode append kernel launch");
    }
  }
  if (pr.Nq == 0 || pr.Hq == 0) return;

  decode::DecodeParams p;
  p.q = a.q.data;
  p.o = a.o.data;
  p.lse = a.write_lse ? static_cast<float*>(a.lse.data) : nullptr;
  copy_strides(p.q_stride, a.q);
  copy_strides(p.o_stride, a.o);
  if (a.write_lse) copy_strides(p.lse_stride, a.lse);
  fill_cache_addressing(p, a);
  p.Nnew = static_cast<int>(a.Nnew);
  p.B = static_cast<int>(pr.B);
  p.Nq = static_cast<int>(pr.Nq);
  p.Hq = static_cast<int>(pr.Hq);
  p.Hkv = static_cast<int>(pr.Hkv);
  p.group = static_cast<int>(pr.heads_per_kv());
  p.m_tiles = m_tiles_of(a);
  p.splits = choose_splits(a);
  p.scale = pr.scale;
  p.scale_log2 = pr.scale * 1.4426950408889634f;
  p.softcap = pr.softcap;
  p.masked = pr.mask.active();
  p.window_left = pr.mask.left;
  p.window_right = pr.mask.right;
  if (p.splits > 1) {
    const std::size_t needed = decode_workspace_bytes(a);
    if (a.workspace.data == nullptr || a.workspace.bytes < needed) {
      throw Error(ErrorCode::internal, "flashpp::forward_kvcache: split-KV workspace missing");
    }
    poison_device_buffer(a.workspace.data, needed, stream);
    const std::size_t rows = static_cast<std::size_t>(p.splits) * pr.B * pr.Hq * pr.Nq;
    const auto base = reinterpret_cast<std::uintptr_t>(a.workspace.data);
    char* aligned = static_cast<char*>(a.workspace.data) +
                    ((kWorkspaceAlignment - base % kWorkspaceAlignment) % kWorkspaceAlignment);
    p.partial_o = reinterpret_cast<float*>(aligned);
    p.partial_lse = reinterpret_cast<float*>(aligned + (rows * pr.D * 4 + 255) / 256 * 256);
    p.legacy_combine = legacy_variant();
    // On sm90 the combine is a programmatic dependent launch; FLASHPP_DECODE_PDL=0 makes it a
    // plain launch (A/B runs; read at every call).
    const char* pdl = std::getenv("FLASHPP_DECODE_PDL");
    const bool pdl_off = pdl != nullptr && pdl[0] == '0' && pdl[1] == '\0';
    p.dependent_launch = !p.legacy_combine && device_shape(pr.device.index).major >= 9 && !pdl_off;
  }
  if (pr.dtype == DType::bf16) {
    dispatch_head_dim<__nv_bfloat16>(pr.D, p, stream);
  } else {
    dispatch_head_dim<__half>(pr.D, p, stream);
  }
}

}  // namespace flashpp::cuda
