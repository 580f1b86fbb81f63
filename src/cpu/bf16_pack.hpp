// Packing bf16 rows into the operand layouts of the bf16 engines' tile product
// (bf16_product.hpp): B operands as VNNI words (pairs along the reduction dimension), A
// operands as plain or transposed bf16 rows, zero-padded to the tile multiples.
//
// Rows come from a callable row(i) -> const std::uint16_t* (D bf16 values, the caller's tensor
// row as it lies; nullptr = a zero row beyond the sequence). Every routine writes its whole
// padded output, so scratch can be reused without clearing.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace flashpp::cpu::FLASHPP_CPU_KERNEL_NAMESPACE {

// Word (d/2, i) of the rows' transpose: out[(d/2) * ld + i] = row_i[d] | row_i[d+1] << 16, for
// i < cols (ld >= cols) and d/2 < Dp/2. The B operand of a product that reduces over d with the
// rows as output columns (S = Q K^T: K rows; dP = dO V^T: V rows).
template <typename Row>
inline void pack_pairs_along_d(Row row, std::int64_t count, std::int64_t cols, std::int64_t ld,
                               std::int64_t D, std::int64_t Dp, std::uint32_t* out) {
  const std::int64_t full = D / 2, used = (D + 1) / 2;
  for (std::int64_t i = 0; i < cols; ++i) {
    const std::uint16_t* r = i < count ? row(i) : nullptr;
    if (r == nullptr) {
      for (std::int64_t d2 = 0; d2 < Dp / 2; ++d2) out[d2 * ld + i] = 0;
      continue;
    }
    for (std::int64_t d2 = 0; d2 < full; ++d2) {
      std::uint32_t w;
      std::memcpy(&w, r + 2 * d2, sizeof w);
      out[d2 * ld + i] = w;
    }
    if (used > full) out[full * ld + i] = r[D - 1];
    for (std::int64_t d2 = used; d2 < Dp / 2; ++d2) out[d2 * ld + i] = 0;
  }
}

// Word (i/2, d) of the rows themselves: out[(i/2) * ld + d] = row_i[d] | row_{i+1}[d] << 16,
// for i/2 < rows_padded/2 and d < Dp (ld >= Dp). The B operand of a product that reduces over
// the rows (O += P~ V: V rows; dQ += dS K: K rows).
template <typename Row>
inline void pack_pairs_along_rows(Row row, std::int64_t count, std::int64_t rows_padded,
                                  std::int64_t ld, std::int64_t D, std::int64_t Dp,
                                  std::uint32_t* out) {
  for (std::int64_t i2 = 0; i2 < rows_padded / 2; ++i2) {
    const std::uint16_t* r0 = 2 * i2 < count ? row(2 * i2) : nullptr;
    const std::uint16_t* r1 = 2 * i2 + 1 < count ? row(2 * i2 + 1) : nullptr;
    std::uint32_t* o = out + i2 * ld;
    if (r0 != nullptr && r1 != nullptr) {
      for (std::int64_t d = 0; d < D; ++d) o[d] = std::uint32_t(r0[d]) | std::uint32_t(r1[d]) << 16;
    } else if (r0 != nullptr) {
      for (std::int64_t d = 0; d < D; ++d) o[d] = r0[d];
    } else {
      for (std::int64_t d = 0; d < D; ++d) o[d] = r1 != nullptr ? std::uint32_t(r1[d]) << 16 : 0u;
    }
    for (std::int64_t d = D; d < Dp; ++d) o[d] = 0;
  }
}

// Plain rows: out[i * ld + d] = row_i[d] for i < rows_padded, d < Dp (zeros beyond).
template <typename Row>
inline void pack_rows(Row row, std::int64_t count, std::int64_t rows_padded, std::int64_t ld,
                      std::int64_t D, std::int64_t Dp, std::uint16_t* out) {
  for (std::int64_t i = 0; i < rows_padded; ++i) {
    const std::uint16_t* r = i < count ? row(i) : nullptr;
    std::uint16_t* o = out + i * ld;
    if (r != nullptr) {
      std::memcpy(o, r, sizeof(std::uint16_t) * D);
      std::memset(o + D, 0, sizeof(std::uint16_t) * (Dp - D));
    } else {
      std::memset(o, 0, sizeof(std::uint16_t) * Dp);
    }
  }
}

// Transposed rows: out[d * ld + i] = row_i[d] for d < Dp, i < rows_padded (zeros beyond).
template <typename Row>
inline void pack_rows_transposed(Row row, std::int64_t count, std::int64_t rows_padded,
                                 std::int64_t ld, std::int64_t D, std::int64_t Dp,
                                 std::uint16_t* out) {
  for (std::int64_t i = 0; i < rows_padded; ++i) {
    const std::uint16_t* r = i < count ? row(i) : nullptr;
    if (r != nullptr) {
      for (std::int64_t d = 0; d < D; ++d) out[d * ld + i] = r[d];
      for (std::int64_t d = D; d < Dp; ++d) out[d * ld + i] = 0;
    } else {
      for (std::int64_t d = 0; d < Dp; ++d) out[d * ld + i] = 0;
    }
  }
}

// ---- the call-wide buffer of packed operands ---------------------------------------------------

// One block of the packed operands (and, in the backward, the dK/dV accumulators) per call. A
// fresh block of tens of MiB costs a page fault per 4 KiB page on first touch: measured on the
// development VM, touching the forward's 16 MiB (B=1, H=8, N=4096, D=128) took 15-35 ms, as
// much as a third of a causal forward on the Xeon. So the block of the last call is kept for
// the next (one spare block per kernel level, up to kMaxKeptBytes; FLASHPP_CPU_PACK_CACHE=0
// frees it after every call instead). The block holds nothing between calls.
inline constexpr std::size_t kPackedBlockHeader = 64;            // the block's size lives here
inline constexpr std::size_t kMaxKeptBytes = std::size_t(512) << 20;
inline std::atomic<void*> spare_packed_block{nullptr};

class PackedBlock {
 public:
  PackedBlock() = default;
  PackedBlock(const PackedBlock&) = delete;
  PackedBlock& operator=(const PackedBlock&) = delete;
  ~PackedBlock() { release(); }

  // A block of at least `bytes` (64-byte aligned); false when the allocation fails.
  bool allocate(std::size_t bytes) {
    release();
    if (bytes == 0) return true;
    void* spare = spare_packed_block.exchange(nullptr);
    if (spare != nullptr && block_bytes(spare) >= bytes) {
      block_ = spare;
      return true;
    }
    std::free(spare);
    const std::size_t total = (bytes + kPackedBlockHeader + 63) / 64 * 64;
    block_ = std::aligned_alloc(64, total);
    if (block_ == nullptr) return false;
    std::memcpy(block_, &total, sizeof total);
    return true;
  }
  template <typename T>
  T* at(std::size_t byte_offset) const {
    if (block_ == nullptr) return nullptr;
    return reinterpret_cast<T*>(static_cast<char*>(block_) + kPackedBlockHeader + byte_offset);
  }

 private:
  static std::size_t block_bytes(void* block) {
    std::size_t total;
    std::memcpy(&total, block, sizeof total);
    return total - kPackedBlockHeader;
  }
  void release() {
    if (block_ == nullptr) return;
    const char* keep = std::getenv("FLASHPP_CPU_PACK_CACHE");
    if (block_bytes(block_) <= kMaxKeptBytes && !(keep != nullptr && keep[0] == '0')) {
      std::free(spare_packed_block.exchange(block_));
    } else {
      std::free(block_);
    }
    block_ = nullptr;
  }
  void* block_ = nullptr;
};

}  // namespace flashpp::cpu::FLASHPP_CPU_KERNEL_NAMESPACE
