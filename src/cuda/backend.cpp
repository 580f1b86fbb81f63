// The CUDA backend's entry points (cuda_backend.hpp): capability checks, workspace sizes, and
// forward/backward dispatch with the device set to the tensors' device. The kernels themselves
// live behind forward.hpp and backward.hpp, in the family folders (src/cuda/sm80/, src/cuda/sm90/).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

#include "backward.hpp"
#include "common/check_cuda.hpp"
#include "cuda_backend.hpp"
#include "decode.hpp"
#include "families.hpp"
#include "forward.hpp"

namespace flashpp::cuda {
namespace {

constexpr std::int64_t kMaxHeadDim = 256;

// Makes `device` current for the lifetime of the guard and restores the caller's device after,
// so that flashpp never changes the calling thread's CUDA state behind its back.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    check_cuda(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device) check_cuda(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceGuard() {
    int current = previous_;
    if (cudaGetDevice(&current) == cudaSuccess && current != previous_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

// flashpp's own stream-ordered memory pool of `device`, created on first use: it keeps freed
// scratch mapped across synchronisations, up to 1 GiB or the largest scratch one call asked for,
// whichever is more (scratch_pool_for). The device's default pool releases everything at each
// synchronisation (release threshold 0), so a caller that synchronises between calls paid a fresh
// mapping of the scratch on every call (FP8 forward, session 16: about 100 us for 32 MiB, 5-20% of
// a call at N = 4096). A private pool leaves the default pool's settings, which the caller or
// torch may rely on, untouched. nullptr when the device or driver has no pools, or
// FLASHPP_CUDA_POOL_KEEP_MB=0 (the default pool is used then). FLASHPP_CUDA_POOL_KEEP_MB=n keeps
// up to n MiB, and no more for a larger call (read once per process): memory the pool keeps is
// outside the caller's allocator (torch's statistics do not see it).
struct PoolKeep {
  std::uint64_t bytes;
  bool fixed;  // set by FLASHPP_CUDA_POOL_KEEP_MB: not raised for larger calls
};

const PoolKeep& pool_keep() {
  static const PoolKeep keep = [] {
    const char* env = std::getenv("FLASHPP_CUDA_POOL_KEEP_MB");
    char* end = nullptr;
    const unsigned long long mb = env != nullptr ? std::strtoull(env, &end, 10) : 1024ull;
    const bool valid = env != nullptr && end != env && *end == '\0';
    return PoolKeep{std::min(valid ? mb : 1024ull, 1ull << 40) << 20, valid};
  }();
  return keep;
}

// The pools of scratch_pool_for, one per device, created on first use, with their release
// thresholds; release_scratch empties them.
struct ScratchPools {
  std::mutex mutex;
  cudaMemPool_t pools[64] = {};
  std::uint64_t thresholds[64] = {};
  bool tried[64] = {};
};

ScratchPools& scratch_pools() {
  static ScratchPools pools;
  return pools;
}

// The pool of `device` for a scratch of `bytes`. Unless the keep limit is fixed, the pool's
// release threshold is raised to `bytes` where that is above it: a call whose scratch alone
// exceeds 1 GiB (the backward's float32 dQ accumulator at B=4, H=32, N=8192, D=256 is 1 GiB + 8
// MiB with lse and delta) was otherwise unmapped at each synchronisation and mapped again by the
// next call (session 26 run 1, H200, do_bench of that backward through the C API: 347 -> 394
// TFLOPS without a mask, 368 -> 380 causal).
cudaMemPool_t scratch_pool_for(int device, std::size_t bytes) {
  if (device < 0 || device >= 64) return nullptr;
  ScratchPools& s = scratch_pools();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.tried[device]) {
    s.tried[device] = true;
    int supported = 0;
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    cudaMemPool_t pool = nullptr;
    if (pool_keep().bytes > 0 &&
        cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, device) == cudaSuccess &&
        supported != 0 && cudaMemPoolCreate(&pool, &props) == cudaSuccess) {
      std::uint64_t keep = pool_keep().bytes;
      cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
      s.pools[device] = pool;
      s.thresholds[device] = keep;
    } else {
      cudaGetLastError();  // no sticky error left behind
    }
  }
  if (s.pools[device] != nullptr && !pool_keep().fixed && bytes > s.thresholds[device]) {
    std::uint64_t keep = bytes;
    if (cudaMemPoolSetAttribute(s.pools[device], cudaMemPoolAttrReleaseThreshold, &keep) == cudaSuccess) {
      s.thresholds[device] = keep;
    } else {
      cudaGetLastError();
    }
  }
  return s.pools[device];
}

// Scratch allocated on the stream when the caller passed no workspace; freed on the same stream
// (stream-ordered, so the free waits for the kernels that use it) even when a launch throws.
// From flashpp's pool (scratch_pool_for), except while the stream is being captured into a graph,
// where the default pool's allocation becomes the graph's own memory node as before.
class StreamScratch {
 public:
  StreamScratch(std::size_t bytes, cudaStream_t stream) : stream_(stream) {
    if (bytes == 0) return;
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    int device = 0;
    cudaMemPool_t pool = nullptr;
    if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess) {
      cudaGetLastError();  // e.g. the legacy stream while another captures: the default pool
    } else if (capture == cudaStreamCaptureStatusNone && cudaGetDevice(&device) == cudaSuccess) {
      pool = scratch_pool_for(device, bytes);
    }
    if (pool != nullptr) {
      check_cuda(cudaMallocFromPoolAsync(&data_, bytes, pool, stream), "cudaMallocFromPoolAsync (workspace)");
    } else {
      check_cuda(cudaMallocAsync(&data_, bytes, stream), "cudaMallocAsync (workspace)");
    }
  }
  ~StreamScratch() {
    if (data_ != nullptr) cudaFreeAsync(data_, stream_);
  }
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;
  void* data() const { return data_; }

 private:
  void* data_ = nullptr;
  cudaStream_t stream_;
};

// run(args), with `bytes` of StreamScratch as the workspace when the caller passed none.
template <typename Args, typename Run>
void run_with_scratch(const Args& args, std::size_t bytes, Run run) {
  if (bytes == 0 || args.workspace.data != nullptr) {
    run(args);
    return;
  }
  StreamScratch scratch(bytes, static_cast<cudaStream_t>(args.stream));
  Args with_scratch = args;
  with_scratch.workspace.data = scratch.data();
  with_scratch.workspace.bytes = bytes;
  run(with_scratch);
}

// The number of visible devices, asked of the runtime until it reports some and then
// remembered (it cannot change within a process: CUDA_VISIBLE_DEVICES is read at
// initialisation); unsupported_reason asks on every call.
int device_count() noexcept {
  static std::atomic<int> known{0};
  const int cached = known.load(std::memory_order_relaxed);
  if (cached > 0) return cached;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return 0;
  }
  if (count > 0) known.store(count, std::memory_order_relaxed);
  return count;
}

}  // namespace

void release_scratch() noexcept {
  ScratchPools& s = scratch_pools();
  std::lock_guard<std::mutex> lock(s.mutex);
  for (cudaMemPool_t& pool : s.pools) {
    if (pool == nullptr) continue;
    const int device = static_cast<int>(&pool - s.pools);
    std::uint64_t keep = pool_keep().bytes;
    // Best effort: a failure leaves no error behind for the caller's next CUDA call.
    if (cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep) == cudaSuccess) {
      s.thresholds[device] = keep;
    } else {
      cudaGetLastError();
    }
    if (cudaMemPoolTrimTo(pool, 0) != cudaSuccess) cudaGetLastError();
  }
}

bool compiled() noexcept { return true; }

bool available() noexcept { return device_count() > 0; }

std::string unsupported_reason(const detail::Problem& p, bool backward) {
  if (p.dtype == DType::e4m3 && !backward) {
    if (p.D % 16 != 0 || p.D > kMaxHeadDim) {
      return "q: the CUDA FP8 (e4m3) forward supports head dims that are multiples of 16 up to "
             "256, got " + std::to_string(p.D);
    }
  } else if (p.dtype != DType::f16 && p.dtype != DType::bf16) {
    return std::string("q: the CUDA backend supports dtype f16 and bf16") +
           (backward ? "" : " (and e4m3 in the forward)") + ", got " + to_string(p.dtype);
  }
  if (p.D % 8 != 0 || p.D > kMaxHeadDim) {
    return "q: the CUDA backend supports head dims that are multiples of 8 up to 256, got " +
           std::to_string(p.D);
  }
  if (p.device.type != DeviceType::cuda) {
    return std::string("q: the CUDA backend needs CUDA tensors, got device ") +
           to_string(p.device.type);
  }
  const int count = device_count();
  if (p.device.index < 0 || p.device.index >= count) {
    return "q: CUDA device ordinal " + std::to_string(p.device.index) + " is not valid (" +
           std::to_string(count) + " CUDA devices visible)";
  }
  if (backward) return backward_unsupported_reason(p);
  if (p.dtype == DType::e4m3) {
    const std::string why_not = sm90_unavailable_reason(p.device.index);
    if (!why_not.empty()) {
      return "q: the CUDA FP8 (e4m3) forward runs on the sm90 kernel family only, and " + why_not;
    }
    if (requested_family() == "sm80") {
      return "q: the CUDA FP8 (e4m3) forward runs on the sm90 kernel family only "
             "(FLASHPP_CUDA_FAMILY=sm80 is set)";
    }
  }
  return {};
}

std::size_t forward_workspace_size(const detail::Problem& problem) {
  if (problem.dtype == DType::e4m3) return sm90::forward_fp8_workspace_bytes(problem);
  // The sm90 family's split walk (sm90/forward/split_walk.hpp), where that family runs the call.
  if (requested_family() == "sm80" || !sm90_unavailable_reason(problem.device.index).empty()) return 0;
  return sm90::forward_split_workspace_bytes(problem);
}

std::size_t backward_workspace_size(const detail::Problem& problem, bool deterministic) {
  return backward_scratch_bytes(problem, deterministic);
}

void forward(const detail::ForwardArgs& args) {
  const std::string reason = forward_layout_unsupported_reason(args);
  if (!reason.empty()) throw Error(ErrorCode::unsupported, "flashpp::forward: " + reason);
  DeviceGuard guard(args.problem.device.index);
  run_with_scratch(args, forward_workspace_size(args.problem), run_forward);
}

std::string kvcache_unsupported_reason(const detail::KvCacheArgs& args) {
  return decode_unsupported_reason(args);
}

std::size_t kvcache_workspace_size(const detail::KvCacheArgs& args) {
  DeviceGuard guard(args.problem.device.index);
  return decode_workspace_bytes(args);
}

void forward_kvcache(const detail::KvCacheArgs& args) {
  DeviceGuard guard(args.problem.device.index);
  run_with_scratch(args, decode_workspace_bytes(args), run_decode);
}

namespace {

constexpr int kForkStreams = 4;

// The fork streams of one device: created on first use, kept for the process (non-blocking, so
// they never synchronise with the legacy default stream behind the caller's back).
struct ForkPool {
  std::mutex mutex;
  cudaStream_t streams[kForkStreams] = {};
  bool ready = false;
};

ForkPool& fork_pool(int device) {
  static ForkPool pools[64];
  return pools[device >= 0 && device < 64 ? device : 0];
}

}  // namespace

void run_forked(int device, void* stream, std::int64_t count,
                const std::function<void(std::int64_t, void*)>& run) {
  if (count <= 1) {
    for (std::int64_t i = 0; i < count; ++i) run(i, stream);
    return;
  }
  DeviceGuard guard(device);
  ForkPool& pool = fork_pool(device);
  std::lock_guard<std::mutex> lock(pool.mutex);  // one caller at a time on the pool's streams
  if (!pool.ready) {
    for (auto& s : pool.streams) {
      check_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate (fork)");
    }
    pool.ready = true;
  }
  const auto main = static_cast<cudaStream_t>(stream);
  const int forks = static_cast<int>(count < kForkStreams ? count : kForkStreams);
  cudaEvent_t start = nullptr;
  check_cuda(cudaEventCreateWithFlags(&start, cudaEventDisableTiming), "cudaEventCreate (fork)");
  std::vector<cudaEvent_t> done(static_cast<std::size_t>(forks), nullptr);
  std::exception_ptr failure;
  try {
    check_cuda(cudaEventRecord(start, main), "cudaEventRecord (fork)");
    for (int f = 0; f < forks; ++f) {
      check_cuda(cudaEventCreateWithFlags(&done[f], cudaEventDisableTiming), "cudaEventCreate (join)");
      check_cuda(cudaStreamWaitEvent(pool.streams[f], start, 0), "cudaStreamWaitEvent (fork)");
    }
    for (std::int64_t i = 0; i < count; ++i) run(i, pool.streams[i % forks]);
  } catch (...) {
    failure = std::current_exception();
  }
  // Join whatever was forked, even after a failure, so that `main` stays ordered after it.
  for (int f = 0; f < forks; ++f) {
    if (done[f] == nullptr) continue;
    if (cudaEventRecord(done[f], pool.streams[f]) == cudaSuccess) cudaStreamWaitEvent(main, done[f], 0);
    cudaEventDestroy(done[f]);
  }
  cudaEventDestroy(start);
  if (failure) std::rethrow_exception(failure);
}

void copy_to_host(void* dst, const void* src, std::size_t bytes, int device, void* stream) {
  DeviceGuard guard(device);
  const auto s = static_cast<cudaStream_t>(stream);
  check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s),
             "cudaMemcpyAsync (index tensor to the host)");
  check_cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize (index tensor to the host)");
}

void backward(const detail::BackwardArgs& args) {
  DeviceGuard guard(args.problem.device.index);
  if (args.workspace.data != nullptr || backward_scratch_bytes(args.problem, args.deterministic) == 0) {
    run_backward(args);
    return;
  }
  const auto stream = static_cast<cudaStream_t>(args.stream);
  StreamScratch scratch(backward_scratch_bytes(args.problem, args.deterministic), stream);
  detail::BackwardArgs with_scratch = args;
  with_scratch.workspace.data = scratch.data();
  with_scratch.workspace.bytes = backward_scratch_bytes(args.problem, args.deterministic);
  run_backward(with_scratch);
}

}  // namespace flashpp::cuda
