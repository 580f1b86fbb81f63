// flashpp: exact attention, softmax(Q K^T * scale) V, computed the FlashAttention way.
//
// This is the public C++ API. It speaks of tensor views (pointer, dtype, device, sizes,
// strides), never of a framework. Every argument is validated before any backend runs; a bad
// argument throws flashpp::Error whose message names the argument, what was expected and what
// was given. The C API (flashpp.h) mirrors this header with error codes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

namespace flashpp {

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------
enum class ErrorCode : int {
  ok = 0,
  invalid_argument = 1,  // a shape, stride, dtype, option or pointer is wrong
  unsupported = 2,       // valid, but the chosen backend cannot do it (e.g. head dim, dtype)
  backend_failure = 3,   // the device reported an error (CUDA launch, out of memory, ...)
  internal = 4,          // a bug in flashpp
};

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

// ---------------------------------------------------------------------------------------------
// Tensor views
// ---------------------------------------------------------------------------------------------
// Storage dtypes. Accumulation is float32 everywhere. f64 is accepted only by the CPU reference
// backend (Backend::cpu_reference), the float64 oracle the tests compare every kernel against.
// e4m3 (float8_e4m3fn: 1 sign, 4 exponent, 3 mantissa bits, no infinities, max 448) is a forward
// input dtype only: q, k and v in e4m3 with optional float32 descale factors (Options), o in f16
// or bf16, lse float32. See docs/fp8.md.
// i32 is for index tensors only (cu_seqlens, cache_seqlens, block_table), never for attention
// data.
enum class DType : int { f32 = 0, f16 = 1, bf16 = 2, f64 = 3, e4m3 = 4, i32 = 5 };
enum class DeviceType : int { cpu = 0, cuda = 1 };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;  // CUDA ordinal; 0 for the CPU
  friend bool operator==(const Device& a, const Device& b) {
    return a.type == b.type && (a.type == DeviceType::cpu || a.index == b.index);
  }
};

const char* to_string(DType dtype) noexcept;
const char* to_string(DeviceType type) noexcept;
std::size_t element_size(DType dtype) noexcept;

// A non-owning view of a strided tensor of rank 1..4. Sizes and strides are in elements; the
// last dimension must be contiguous (stride 1), every other stride is free.
//
// By meaning: q, o, dout, dq are [B, Nq, Hq, D]; k, v, dk, dv are [B, Nk, Hkv, D]; lse is
// [B, Hq, Nq] float32. The [B, H, N, D] memory layout is expressed by strides alone.
struct TensorView {
  static constexpr int kMaxRank = 4;
  void* data = nullptr;
  DType dtype = DType::f32;
  Device device{};
  int rank = 0;
  std::int64_t sizes[kMaxRank] = {0, 0, 0, 0};
  std::int64_t strides[kMaxRank] = {0, 0, 0, 0};

  std::int64_t size(int dim) const { return sizes[dim]; }
  std::int64_t stride(int dim) const { return strides[dim]; }
  std::int64_t numel() const;
  bool empty() const { return rank == 0 && data == nullptr; }
};

// A 4-d view [B, N, H, D] of memory laid out as [B, N, H, D] (the "bnhd" layout).
TensorView make_bnhd(void* data, DType dtype, std::int64_t B, std::int64_t N, std::int64_t H,
                     std::int64_t D, Device device = {});
// A 4-d view [B, N, H, D] of memory laid out as [B, H, N, D] (the "bhnd" layout).
TensorView make_bhnd(void* data, DType dtype, std::int64_t B, std::int64_t N, std::int64_t H,
                     std::int64_t D, Device device = {});
// A contiguous float32 view [B, H, N] (the lse layout).
TensorView make_lse(float* data, std::int64_t B, std::int64_t H, std::int64_t N,
                    Device device = {});

// ---------------------------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------------------------

// Which diagonal the causal mask and the sliding window follow when Nq != Nk.
//   top_left:     query i is aligned with key i            (torch SDPA is_causal)
//   bottom_right: query i is aligned with key i + Nk - Nq  (flash_attn >= 2.1, KV-cache decode)
enum class Alignment : int { top_left = 0, bottom_right = 1 };

// Backend selection. `automatic` picks the tensors' device.
enum class Backend : int { automatic = 0, cpu = 1, cuda = 2, cpu_reference = 3 };

inline constexpr std::int64_t kUnbounded = -1;

struct Options {
  // Multiplies Q K^T. Non-positive or NaN means the default, 1/sqrt(D).
  float softmax_scale = std::numeric_limits<float>::quiet_NaN();

  // Masking. With alignment offset s (0 for top_left, Nk - Nq for bottom_right), query i sees
  // key j iff  j <= i + s (causal)  and  i + s - window_left <= j <= i + s + window_right,
  // where kUnbounded removes that side's limit. causal is the same as window_right = 0.
  bool causal = false;
  Alignment alignment = Alignment::top_left;
  std::int64_t window_left = kUnbounded;
  std::int64_t window_right = kUnbounded;

  // Logit soft-capping: S = softcap * tanh(S / softcap) after scaling. 0 turns it off.
  float softcap = 0.0f;

  // Dropout on the attention probabilities. The keep mask of element (b, h, i, j) is a pure
  // function of (seed, offset, b, h, i, j) through Philox4x32-7 (see docs/design.md and
  // src/common/philox.hpp): the backward regenerates exactly the forward's mask, and every
  // backend produces the same mask.
  float dropout_p = 0.0f;
  std::uint64_t seed = 0;
  std::uint64_t offset = 0;

  // Backward: produce bit-identical results run to run (no floating-point atomics). Without it
  // the CUDA backward sums dQ, and dK/dV of the key tiles it splits over several blocks, with
  // float32 atomics, whose order varies (differences of the order of float32 rounding).
  bool deterministic = false;

  // Forward: write lse. When false, `lse` may be an empty view.
  bool write_lse = true;

  Backend backend = Backend::automatic;

  // FP8 forward (q, k, v of dtype e4m3) only: the true inputs are q * q_descale, k * k_descale,
  // v * v_descale, one float32 factor per (batch, kv head): views [B, Hkv] of float32 on the
  // tensors' device (any strides). An empty view means 1. Query head h uses the factor of its kv
  // head h / (Hq / Hkv). Giving a descale with inputs that are not e4m3 is an error.
  TensorView q_descale{};
  TensorView k_descale{};
  TensorView v_descale{};
};

// ---------------------------------------------------------------------------------------------
// Workspace
// ---------------------------------------------------------------------------------------------
// Scratch memory a call may need (on the tensors' device). Ask with *_workspace_size(); pass a
// buffer at least that large, or pass an empty Workspace and flashpp allocates (and frees) it:
// on CUDA stream-ordered, from a memory pool of flashpp's own per device that keeps freed
// scratch mapped for the next calls: up to 1 GiB, or the largest scratch one call asked for if
// that is more (FLASHPP_CUDA_POOL_KEEP_MB=n: n MiB whatever the calls ask, 0: the default pool;
// the default pool also while the stream is captured).
struct Workspace {
  void* data = nullptr;
  std::size_t bytes = 0;
};

// ---------------------------------------------------------------------------------------------
// Attention
// ---------------------------------------------------------------------------------------------
// `stream` is a cudaStream_t for CUDA tensors (nullptr = the default stream), ignored on CPU.

// Bytes of scratch forward() needs on the tensors' device (now: the CUDA FP8 forward's V
// transposed, as large as V; on Hopper, unmasked fp16/bf16 calls at head dims 104-128 with 3969
// keys or more that take the split walk (README, "CUDA kernel families"), its partial states,
// about 70 KB per SM; 0 for everything else). forward() allocates it when given none.
std::size_t forward_workspace_size(const TensorView& q, const TensorView& k, const TensorView& v,
                                   const Options& options = {});

// o = softmax(q k^T * scale) v, and lse = log-sum-exp of each row of scaled scores.
// Rows that see no key give o = 0 and lse = -inf.
// FP8: q, k, v of dtype e4m3 (descales in options), o of dtype f16 or bf16; dropout and softcap
// are not supported with e4m3 inputs, nor is a backward through an FP8 forward.
void forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
             const TensorView& lse, const Options& options = {}, void* stream = nullptr,
             const Workspace& workspace = {});

std::size_t backward_workspace_size(const TensorView& q, const TensorView& k,
                                    const TensorView& v, const Options& options = {});

// Gradients of the forward with the same options. o and lse are the forward's outputs; dout is
// the gradient of o. dk and dv sum the contributions of every query head sharing a kv head.
void backward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
              const TensorView& lse, const TensorView& dout, const TensorView& dq,
              const TensorView& dk, const TensorView& dv, const Options& options = {},
              void* stream = nullptr, const Workspace& workspace = {});

// ---------------------------------------------------------------------------------------------
// Inference: KV-cache decoding (contiguous or paged cache, optional append)
// ---------------------------------------------------------------------------------------------
// q [B, Nq, Hq, D] attends to the first cache_seqlens[b] (+ Nnew) keys of sequence b's cache.
//
//   contiguous cache: k_cache, v_cache are [B, capacity, Hkv, D]; block_table is empty.
//   paged cache:      k_cache, v_cache are [num_pages, page_size, Hkv, D] (pages shared by all
//                     sequences); block_table is int32 [B, max_pages] and key j of sequence b
//                     lives in page block_table[b][j / page_size] at row j % page_size.
//                     The CUDA backend needs page_size to be a multiple of 16.
//   cache_seqlens:    int32 [B], the keys already in the cache for each sequence.
//   k_new, v_new:     optional [B, Nnew, Hkv, D]: written into the cache at rows
//                     cache_seqlens[b] .. cache_seqlens[b] + Nnew - 1 first (the cache is
//                     modified in place; cache_seqlens is not), then attended to as well.
//
// Sequence b thus attends to Nk_b = cache_seqlens[b] + Nnew keys. The causal mask and the window
// always align bottom-right (the last query sees the last key), as decoding needs; dropout is not
// supported. lse is float32 [B, Hq, Nq] as for forward(); rows that see no key (Nk_b = 0, or a
// window) give o = 0 and lse = -inf.
//
// Index tensors are validated element by element (decreasing or out-of-range lengths, page ids
// outside [0, num_pages)) when validate_indices is true: on CUDA that copies them to the host,
// a synchronisation (the CPU backends always check: they read the lengths on the host anyway).
// With validate_indices = false nothing is copied; the CUDA kernels then
// clamp lengths to the capacity and treat a page id out of range as a page of masked keys, so a
// bad index never reads or writes out of bounds (but the result is meaningless).
struct KvCache {
  TensorView k_cache, v_cache;
  TensorView cache_seqlens;
  TensorView block_table;  // empty: contiguous cache
  TensorView k_new, v_new; // empty: nothing to append
  bool validate_indices = true;
};

std::size_t forward_kvcache_workspace_size(const TensorView& q, const KvCache& cache,
                                           const Options& options = {});

void forward_kvcache(const TensorView& q, const KvCache& cache, const TensorView& o,
                     const TensorView& lse, const Options& options = {}, void* stream = nullptr,
                     const Workspace& workspace = {});

// ---------------------------------------------------------------------------------------------
// Variable-length batches (packed sequences, no padding)
// ---------------------------------------------------------------------------------------------
// Sequence b has queries q[cu_seqlens_q[b] : cu_seqlens_q[b+1]] and keys/values
// k[cu_seqlens_k[b] : cu_seqlens_k[b+1]]: q, o, dout, dq are [total_q, Hq, D]; k, v, dk, dv are
// [total_k, Hkv, D]; lse is float32 [Hq, total_q]. cu_seqlens_* are int32 [B+1], start at 0,
// never decrease and end at most at the tensors' lengths; max_seqlen_* bound every sequence's
// length. Each sequence is an independent attention problem with the given options (causal
// alignment and windows apply per sequence). The index contents are read on the host (on CUDA a
// copy to the host, a synchronisation) and checked before anything runs. With dropout, sequence
// b uses a seed derived from (options.seed, b), so that sequences get independent masks.
struct PackedBatch {
  TensorView cu_seqlens_q, cu_seqlens_k;
  std::int64_t max_seqlen_q = 0, max_seqlen_k = 0;
};

void forward_varlen(const TensorView& q, const TensorView& k, const TensorView& v,
                    const PackedBatch& batch, const TensorView& o, const TensorView& lse,
                    const Options& options = {}, void* stream = nullptr);

void backward_varlen(const TensorView& q, const TensorView& k, const TensorView& v,
                     const TensorView& o, const TensorView& lse, const TensorView& dout,
                     const TensorView& dq, const TensorView& dk, const TensorView& dv,
                     const PackedBatch& batch, const Options& options = {},
                     void* stream = nullptr);

// Whether flashpp was built with the CUDA backend, and whether a CUDA device is usable now.
bool cuda_compiled() noexcept;
bool cuda_available() noexcept;

// Which CUDA kernel families flashpp runs on `device` now, in words, e.g.
//   "forward: sm90 (wgmma, TMA, warp-specialised); backward: sm80 (mma.sync) ..."
// with the reason whenever a slower family stands in (older GPU, a build without sm_90a, an
// environment override). Benchmarks print it so that no slow path goes unnoticed.
std::string cuda_kernel_families(int device = 0);

// Gives the device memory that flashpp's scratch pools keep between calls (the Workspace
// section above) back to the driver, on every device, and sets their keep limit back to 1 GiB
// (or FLASHPP_CUDA_POOL_KEEP_MB). Scratch of calls still queued on a stream is released when they
// finish, not by this call: synchronise those streams first to give back all of it. Nothing to do
// without CUDA; never throws (CUDA errors are ignored, as in a destructor).
void cuda_release_scratch() noexcept;

// Which CPU kernel Backend::cpu runs now for `dtype` (forward, or backward when `backward`), and
// the CPU features it was chosen from, e.g. "amx bf16 (tdpbf16ps tiles); cpu: avx2 fma ...".
// The kernel is the best the CPU supports, or the level the environment variable
// FLASHPP_CPU_ISA names (generic, avx2, avx512, avx512bf16, amx; a level the CPU lacks makes
// Backend::cpu calls throw Error(unsupported)). Benchmarks print it.
std::string cpu_kernel(DType dtype, bool backward = false);

// "0.1.0"
const char* version() noexcept;

}  // namespace flashpp
