// Per-thread scratch tiles: 64-byte aligned float32 buffers, allocated once per thread per call
// (never per tile), so that the memory a call needs beyond its outputs is O(tile) per thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <utility>


namespace flashpp::cpu {
// Throws flashpp::Error(backend_failure) naming `call` (src/cpu/dispatch.cpp: compiled once, for
// the baseline, so that no per-ISA build emits a copy of Error's inline members).
[[noreturn]] void throw_scratch_allocation_failure(const char* call);
}  // namespace flashpp::cpu

namespace flashpp::cpu::FLASHPP_CPU_KERNEL_NAMESPACE {

struct FreeDeleter {
  void operator()(float* p) const noexcept { std::free(p); }
};

class ScratchTile {
 public:
  ScratchTile() = default;
  explicit ScratchTile(std::int64_t floats) {
    // aligned_alloc wants a size that is a multiple of the alignment; +16 floats of slack also
    // lets a masked tail load run past the last element without leaving the allocation.
    const std::size_t bytes = (static_cast<std::size_t>(floats + 16) * sizeof(float) + 63) / 64 * 64;
    data_.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
    if (!data_) throw std::bad_alloc();  // caught by make_thread_scratch
  }
  float* get() const { return data_.get(); }

 private:
  std::unique_ptr<float[], FreeDeleter> data_;
};

// An exception must not leave an OpenMP region (the program would terminate). Each thread builds
// its scratch through make_thread_scratch, which records a failed allocation in `failed`; after
// a barrier every thread skips its tasks, and the caller throws (throw_if_out_of_memory) once the
// region has ended.
template <typename Scratch, typename... Args>
std::unique_ptr<Scratch> make_thread_scratch(std::atomic<bool>& failed, Args&&... args) {
  try {
    return std::make_unique<Scratch>(std::forward<Args>(args)...);
  } catch (const std::bad_alloc&) {
    failed = true;
    return nullptr;
  }
}

inline void throw_if_out_of_memory(const std::atomic<bool>& failed, const char* call) {
  if (failed) throw_scratch_allocation_failure(call);
}

inline std::int64_t round_up(std::int64_t x, std::int64_t multiple) {
  return (x + multiple - 1) / multiple * multiple;
}

}  // namespace flashpp::cpu::FLASHPP_CPU_KERNEL_NAMESPACE
