// Tensor maps are remembered per request (src/cuda/tensor_map.cpp): a remembered map must be
// byte for byte what the driver encodes for the same request, after repeats and evictions, and
// refusals must stay refusals.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "cuda/common/tensor_map.hpp"
#include "gpu_buffer.hpp"

namespace flashpp::cuda {
namespace {

struct Request {
  std::uintptr_t address;
  DType dtype;
  std::int64_t batch, rows, heads, head_dim;
  int box_rows;
};

bool remembered(CUtensorMap* map, const Request& r) {
  const std::int64_t row = r.heads * r.head_dim;
  return make_row_tile_map(map, reinterpret_cast<const void*>(r.address), r.dtype, r.batch,
                           r.rows, r.heads, r.head_dim, r.rows * row, row, r.head_dim,
                           r.box_rows);
}

bool encoded(CUtensorMap* map, const Request& r) {
  const std::int64_t row = r.heads * r.head_dim;
  return encode_row_tile_map(map, reinterpret_cast<const void*>(r.address), r.dtype, r.batch,
                             r.rows, r.heads, r.head_dim, r.rows * row, row, r.head_dim,
                             r.box_rows);
}

TEST(TensorMapCache, RememberedMapsAreTheDriversBytes) {
  FLASHPP_SKIP_WITHOUT_GPU();
  CUtensorMap probe;
  const Request first{std::uintptr_t{1} << 40, DType::f16, 1, 128, 8, 64, 128};
  if (!encoded(&probe, first)) GTEST_SKIP() << "the driver has no cuTensorMapEncodeTiled";
  // More requests than the cache has slots, so that some evict others; encoding reads no
  // memory, so made-up 256-byte aligned addresses serve.
  std::vector<Request> requests;
  for (int i = 0; i < 700; ++i) {
    const DType dtype = i % 3 == 0 ? DType::bf16 : (i % 3 == 1 ? DType::f16 : DType::e4m3);
    requests.push_back({(std::uintptr_t{1} << 40) + 256u * static_cast<unsigned>(i % 97), dtype,
                        1 + i % 3, 64 + 16 * (i % 11), 1 + i % 5, 64 * (1 + i % 2),
                        i % 2 ? 64 : 128});
  }
  for (int pass = 0; pass < 3; ++pass) {
    for (const Request& r : requests) {
      CUtensorMap want, got;
      std::memset(&want, 0, sizeof(want));
      std::memset(&got, 0xAB, sizeof(got));
      const bool ok = encoded(&want, r);
      ASSERT_EQ(remembered(&got, r), ok) << "pass " << pass;
      if (ok) ASSERT_EQ(std::memcmp(&want, &got, sizeof(want)), 0) << "pass " << pass;
    }
  }
}

TEST(TensorMapCache, RefusalsAreNotRemembered) {
  FLASHPP_SKIP_WITHOUT_GPU();
  CUtensorMap map;
  const Request good{std::uintptr_t{1} << 40, DType::f16, 1, 128, 8, 64, 128};
  if (!encoded(&map, good)) GTEST_SKIP() << "the driver has no cuTensorMapEncodeTiled";
  Request misaligned = good;
  misaligned.address += 8;  // the driver needs 16-byte aligned addresses
  EXPECT_FALSE(encoded(&map, misaligned));
  EXPECT_FALSE(remembered(&map, misaligned));
  EXPECT_FALSE(remembered(&map, misaligned));
  EXPECT_TRUE(remembered(&map, good));
}

}  // namespace
}  // namespace flashpp::cuda
