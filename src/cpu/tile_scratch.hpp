// Per-thread scratch tiles: 64-byte aligned float32 buffers, allocated once per thread per call
// (never per tile), so that the memory a call needs beyond its outputs is O(tile) per thread.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>

namespace flashpp::cpu {

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
    if (!data_) throw std::bad_alloc();
  }
  float* get() const { return data_.get(); }

 private:
  std::unique_ptr<float[], FreeDeleter> data_;
};

inline std::int64_t round_up(std::int64_t x, std::int64_t multiple) {
  return (x + multiple - 1) / multiple * multiple;
}

}  // namespace flashpp::cpu
