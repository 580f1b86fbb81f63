// The CUDA forward's kernel families, each forced in turn (FLASHPP_CUDA_FAMILY), against the float64
// oracle: sm80 everywhere, sm90 on compute capability 9.0 devices of builds with sm_90a. The cases
// reach what the family-specific code does: many key tiles (the TMA ring wraps its phases), the
// last partial tile, every head dim class and rounded-up dims, GQA, Nq != Nk with both causal
// alignments, windows that mask both ends of a row, softcap, dropout, rows with no visible key,
// strided views. The criterion is the sweep's (test_forward_vs_oracle.cpp): at most 2x the
// error of the naive computation in the storage dtype, and within the float32-kernel tolerance.
#include <gtest/gtest.h>
#include <cuda_runtime.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "common/metrics.hpp"
#include "common/tolerance.hpp"
#include "gpu_buffer.hpp"
#include "gpu_runner.hpp"
#include "scoped_env.hpp"

namespace flashpp {
namespace {

using test::AttentionCase;
using test::Layout;

// FLASHPP_CUDA_FAMILY=family for the lifetime of the guard, then as the binary was started.
class FamilyGuard {
 public:
  explicit FamilyGuard(const char* family) : env_("FLASHPP_CUDA_FAMILY", family) {}

 private:
  gpu_test::ScopedEnv env_;
};

bool device_is_sm90() {
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) != cudaSuccess) return false;
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
  return major == 9 && minor == 0;
}

AttentionCase make_case(std::int64_t B, std::int64_t Nq, std::int64_t Nk, std::int64_t Hq,
                        std::int64_t Hkv, std::int64_t D, DType dtype, Layout layout,
                        Options options = {}) {
  AttentionCase c;
  c.shape = {B, Nq, Nk, Hq, Hkv, D};
  c.dtype = dtype;
  c.layout = layout;
  c.options = options;
  c.seed = static_cast<std::uint64_t>(B * 7919 + Nq * 613 + Nk * 37 + D * 11 + Hq * 3 + Hkv);
  return c;
}

// The sm90 forward on `blocks` persistent blocks that walk every item for the guard's lifetime
// (FLASHPP_SM90_FWD_PERSISTENT=1, FLASHPP_SM90_FWD_MAX_BLOCKS=blocks): the ring, the Q tile's
// barriers and the issue turns carried from item to item. Nothing when blocks is "".
class PersistentBlocks {
 public:
  explicit PersistentBlocks(const char* blocks) {
    if (blocks[0] == '\0') return;
    persistent_.emplace("FLASHPP_SM90_FWD_PERSISTENT", "1");
    max_blocks_.emplace("FLASHPP_SM90_FWD_MAX_BLOCKS", blocks);
  }

 private:
  std::optional<gpu_test::ScopedEnv> persistent_, max_blocks_;
};

Options causal(Alignment a) {
  Options o;
  o.causal = true;
  o.alignment = a;
  return o;
}

std::vector<AttentionCase> family_cases(DType dt, bool sm90) {
  std::vector<AttentionCase> cases;
  // Every head dim class, many key tiles (ring phases wrap), last tile partial.
  for (std::int64_t D : {40, 64, 96, 128, 136, 192, 256}) {
    cases.push_back(make_case(1, 300, 1100, 2, 1, D, dt, Layout::bnhd));
    cases.push_back(make_case(1, 1100, 1100, 2, 2, D, dt, Layout::bhnd, causal(Alignment::top_left)));
  }
  // Tiny key lengths with many query rows (keys past Nk must read as zero, never as garbage).
  for (std::int64_t Nk : {1, 2, 3}) {
    cases.push_back(make_case(2, 1537, Nk, 2, 2, 224, dt, Layout::bnhd, causal(Alignment::top_left)));
    cases.push_back(make_case(1, 1537, Nk, 2, 1, 64, dt, Layout::bnhd));
  }
  // GQA 4:1 and MQA, Nq != Nk both ways, both alignments.
  cases.push_back(make_case(1, 2000, 900, 8, 2, 128, dt, Layout::bnhd, causal(Alignment::bottom_right)));
  cases.push_back(make_case(1, 257, 2000, 4, 1, 64, dt, Layout::bhnd, causal(Alignment::top_left)));
  cases.push_back(make_case(2, 700, 300, 3, 3, 128, dt, Layout::bnhd, causal(Alignment::bottom_right)));
  // Windows: rows whose range starts and ends inside the key range.
  {
    Options o;
    o.window_left = 200;
    o.window_right = 33;
    cases.push_back(make_case(1, 900, 900, 2, 1, 128, dt, Layout::bnhd, o));
    o.alignment = Alignment::bottom_right;
    o.window_right = 0;
    cases.push_back(make_case(1, 300, 1000, 2, 2, 64, dt, Layout::bhnd, o));
  }
  // Softcap, dropout (the oracle applies the same Philox mask), both with causal.
  {
    Options o = causal(Alignment::top_left);
    o.softcap = 5.0f;
    o.softmax_scale = 0.5f;
    cases.push_back(make_case(1, 600, 600, 2, 2, 128, dt, Layout::bnhd, o));
    o.softcap = 0.0f;
    o.softmax_scale = 0.0f;
    o.dropout_p = 0.15f;
    o.seed = 99;
    o.offset = 5;
    cases.push_back(make_case(1, 500, 700, 2, 1, 64, dt, Layout::bnhd, o));
    cases.push_back(make_case(1, 333, 333, 2, 2, 256, dt, Layout::bhnd, o));
  }
  // More items (query tile x head) than a GPU holds blocks, without a mask: the sm90 forward's
  // persistent blocks walk two or three items each, carrying the K/V ring, the Q tile's barriers
  // and the issue turns over. D=256 stages O through the Q tile, the others through a buffer of
  // their own. (sm90 only: the sm80 grid has one block per item, and these cost the float64
  // oracle seconds each. Masked items on a walking grid: ForwardSm90Small below.)
  if (sm90) {
    cases.push_back(make_case(2, 1100, 800, 16, 4, 64, dt, Layout::bnhd));
    cases.push_back(make_case(1, 400, 200, 40, 8, 256, dt, Layout::bhnd));
    Options o;
    o.dropout_p = 0.1f;
    o.seed = 7;
    cases.push_back(make_case(1, 520, 400, 36, 36, 128, dt, Layout::bnhd, o));
  }
  // No keys at all, and rows with no visible key (bottom-right with Nq > Nk).
  cases.push_back(make_case(1, 130, 0, 2, 2, 128, dt, Layout::bnhd));
  cases.push_back(make_case(1, 400, 100, 2, 2, 128, dt, Layout::bnhd, causal(Alignment::bottom_right)));
  return cases;
}

struct FamilyParam {
  const char* family;
  DType dtype;
};

// The forced family for each test (skipped where it cannot run).
class ForwardFamilies : public ::testing::TestWithParam<FamilyParam> {
 protected:
  void SetUp() override {
    FLASHPP_SKIP_WITHOUT_GPU();
    if (std::string(GetParam().family) == "sm90" && !device_is_sm90()) {
      GTEST_SKIP() << "the sm90 family runs on compute capability 9.0 only";
    }
    guard_.emplace(GetParam().family);
  }

 private:
  std::optional<FamilyGuard> guard_;
};

TEST_P(ForwardFamilies, MatchOracle) {
  const FamilyParam param = GetParam();
  for (const AttentionCase& c : family_cases(param.dtype, std::string(param.family) == "sm90")) {
    SCOPED_TRACE(std::string(param.family) + " " + c.describe());
    gpu_test::expect_forward_matches_oracle(c, test::make_inputs(c));
    if (::testing::Test::HasFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Families, ForwardFamilies,
    ::testing::Values(FamilyParam{"sm80", DType::f16}, FamilyParam{"sm80", DType::bf16},
                      FamilyParam{"sm90", DType::f16}, FamilyParam{"sm90", DType::bf16}),
    [](const auto& info) {
      return std::string(info.param.family) + "_" + to_string(info.param.dtype);
    });

// Scores that jump between key tiles: the sm90 forward keeps each row's reference max while a
// tile's P stay below 2^8 and starts the exponentials before the tile's max is known
// (online_softmax_speculative); larger jumps take its rescaled case, jumps of 2^100 and more its
// recomputed case, and rows that see their first key after the first tile (windows) the rescaled
// case. Keys in a band of rows scaled by 8 (scores ~20 nats above the others: rescaled) or by 64
// (~160 nats: recomputed), early keys (the kernels walk key tiles from the last one) or middle
// ones; the same criterion as MatchOracle.
TEST_P(ForwardFamilies, ScoreJumpsBetweenKeyTiles) {
  const FamilyParam param = GetParam();
  struct Band {
    std::int64_t lo, hi;
    double factor;
  };
  Options window;
  window.window_left = 300;
  window.window_right = 40;
  for (std::int64_t D : {64, 128, 256})
    for (const Band band :
         {Band{0, 256, 8.0}, Band{0, 256, 64.0}, Band{512, 640, 8.0}, Band{512, 640, 64.0}})
      for (const Options& o : {Options{}, causal(Alignment::top_left), window}) {
        const AttentionCase c = make_case(1, 300, 1100, 2, 1, D, param.dtype, Layout::bnhd, o);
        SCOPED_TRACE(std::string(param.family) + " " + c.describe() + " keys " +
                     std::to_string(band.lo) + ".." + std::to_string(band.hi) + " x" +
                     std::to_string(band.factor));
        test::AttentionInputs in = test::make_inputs(c);
        for (std::int64_t j = band.lo; j < band.hi; ++j)
          for (std::int64_t d = 0; d < D; ++d)
            in.k.set(0, j, 0, d, in.k.get(0, j, 0, d) * band.factor);
        gpu_test::expect_forward_matches_oracle(c, in);
        if (::testing::Test::HasFailure()) return;
      }
}

// A forced family that cannot run is an error naming the variable, never a silent switch.
TEST(ForwardFamilies, BadFamilyNameIsAnError) {
  FLASHPP_SKIP_WITHOUT_GPU();
  const FamilyGuard guard("sm75");
  const AttentionCase c = make_case(1, 16, 16, 1, 1, 64, DType::f16, Layout::bnhd);
  const test::AttentionInputs in = test::make_inputs(c);
  try {
    gpu_test::run_forward_cuda(in, c.options);
    FAIL() << "FLASHPP_CUDA_FAMILY=sm75 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("FLASHPP_CUDA_FAMILY"), std::string::npos) << e.what();
  }
}

// Small shapes of the sm90 family for compute-sanitizer (the '*Small*' filter of gpu_check.sh):
// several ring phases, a partial last tile, masked and unmasked tiles, extras on.
TEST(ForwardSm90Small, SanitizerShapes) {
  FLASHPP_SKIP_WITHOUT_GPU();
  if (!device_is_sm90()) GTEST_SKIP() << "the sm90 family runs on compute capability 9.0 only";
  const FamilyGuard guard("sm90");
  std::vector<AttentionCase> cases;
  cases.push_back(make_case(1, 200, 600, 2, 1, 128, DType::f16, Layout::bnhd));
  cases.push_back(make_case(1, 150, 150, 1, 1, 64, DType::bf16, Layout::bhnd, causal(Alignment::bottom_right)));
  {
    Options o = causal(Alignment::top_left);
    o.dropout_p = 0.3f;
    o.softcap = 8.0f;
    cases.push_back(make_case(1, 100, 300, 1, 1, 256, DType::f16, Layout::bnhd, o));
  }
  cases.push_back(make_case(1, 70, 3, 1, 1, 192, DType::bf16, Layout::bnhd));
  // Items without a visible key between others (bottom-right, Nq > Nk), O staged through Q (D=256).
  cases.push_back(make_case(2, 300, 100, 3, 1, 64, DType::f16, Layout::bnhd, causal(Alignment::bottom_right)));
  cases.push_back(make_case(1, 300, 100, 3, 3, 256, DType::bf16, Layout::bhnd, causal(Alignment::bottom_right)));
  // The same at D=128 and D=96: on the persistent grid under a mask the producer hands each item
  // to the consumers (kernel.cuh, ItemHandoff), items without a visible key among them.
  cases.push_back(make_case(2, 300, 100, 3, 1, 128, DType::bf16, Layout::bnhd, causal(Alignment::bottom_right)));
  cases.push_back(make_case(1, 400, 150, 2, 2, 96, DType::f16, Layout::bhnd, causal(Alignment::bottom_right)));
  // Dropout at D 64 and 128 over many key tiles, items without a visible key among others;
  // softcap alone (the extras kernel without dropout).
  {
    Options o;
    o.dropout_p = 0.2f;
    o.seed = 11;
    cases.push_back(make_case(1, 200, 700, 2, 1, 128, DType::bf16, Layout::bnhd, o));
    Options oc = causal(Alignment::bottom_right);
    oc.dropout_p = 0.3f;
    oc.seed = 12;
    cases.push_back(make_case(2, 300, 100, 3, 1, 64, DType::f16, Layout::bnhd, oc));
    Options os = causal(Alignment::top_left);
    os.softcap = 6.0f;
    cases.push_back(make_case(1, 260, 400, 2, 2, 64, DType::bf16, Layout::bhnd, os));
    // Dropout where the last query tile leaves the second consumer without rows (pass_item),
    // and at D=96.
    o.seed = 13;
    cases.push_back(make_case(1, 150, 600, 2, 1, 128, DType::bf16, Layout::bnhd, o));
    cases.push_back(make_case(2, 40, 520, 2, 2, 96, DType::f16, Layout::bhnd, o));
    // Softcap at D 96 and 128, alone and with dropout under a mask (the two-warpgroup tile's
    // softcap-and-dropout kernel: the tall tiles take no softcap or dropout call).
    Options sc;
    sc.softcap = 7.0f;
    cases.push_back(make_case(1, 450, 500, 2, 1, 128, DType::f16, Layout::bnhd, sc));
    Options scd = causal(Alignment::bottom_right);
    scd.softcap = 5.0f;
    scd.dropout_p = 0.25f;
    scd.seed = 14;
    cases.push_back(make_case(1, 230, 300, 2, 1, 96, DType::bf16, Layout::bhnd, scd));
  }
  // D=64 without a mask: the tall tiles (three consumer warpgroups, 192 rows) by default; a
  // partial last tile of queries and of keys.
  cases.push_back(make_case(1, 500, 333, 2, 1, 64, DType::bf16, Layout::bnhd));
  // Last query tiles with whole consumers past the last row (pass_item), taken first by the
  // persistent grid (last_tiles_first_item): two idle consumers of the tall tile (Nq = 2 * 192 +
  // 16), one of the two-consumer tile at D=128 (Nq = 2 * 128 + 44).
  cases.push_back(make_case(2, 400, 260, 3, 1, 64, DType::f16, Layout::bhnd));
  cases.push_back(make_case(1, 300, 200, 2, 2, 128, DType::bf16, Layout::bnhd));
  // Each case on the default grid and on two persistent blocks that walk every item (the ring,
  // the Q tile's barriers and the issue turns carried from item to item, masked items and items
  // without a visible key among them); and both again with the tall tiles forced where a call
  // can take them (FLASHPP_SM90_FWD_TALL=1: the masked D=64 cases above), and with the long-keys
  // tile forced where a call can take it (FLASHPP_SM90_FWD_LONG=1: the unmasked D 96 and 128
  // cases without softcap and dropout, 80-key tiles).
  for (const std::string tile : {"", "tall", "long"})
  for (const char* max_blocks : {"", "2"}) {
    // Set for this pass, restored after it (to what the binary was started with).
    std::optional<gpu_test::ScopedEnv> tall_env, long_env;
    if (!tile.empty()) {
      tall_env.emplace("FLASHPP_SM90_FWD_TALL", "1");
      long_env.emplace("FLASHPP_SM90_FWD_LONG", tile == "long" ? "1" : "0");
    }
    const PersistentBlocks persistent(max_blocks);
    for (const AttentionCase& c : cases) {
      SCOPED_TRACE(c.describe() + " max blocks '" + max_blocks + "' tile '" + tile + "'");
      const test::AttentionInputs in = test::make_inputs(c);
      const test::ForwardOutputs ours = gpu_test::run_forward_cuda(in, c.options);
      const test::OracleResult ref = test::run_oracle(in, c.options, false);
      EXPECT_EQ(test::count_nan(ours.o), 0) << "O has unwritten (NaN) elements";
      EXPECT_LE(test::relative_error(ours.o, ref.fwd.o), test::float32_kernel_tolerance(c.dtype).o);
      EXPECT_LE(test::max_scaled_error(ours.lse, ref.fwd.lse), test::float32_kernel_tolerance(c.dtype).lse);
    }
  }
}

// Each consumer warpgroup multiplies only the key tiles its own 64 rows see (a causal diagonal
// through the 192-row tall tile, sliding windows narrower than a block's rows), and under a mask
// limiting keys to the right the query tiles start before row 0 where the length leaves whole
// warpgroups of a tile without rows (q_tile_shift): the first tile's leading warpgroups have no
// rows. Each case with the shift on (default) and off, on the default grid and on two persistent
// blocks that walk every item; against the float64 oracle, O poisoned (the runner), so a row
// that no warpgroup wrote shows as NaN.
TEST(ForwardSm90Small, WarpgroupKeyRangesAndShiftedTiles) {
  FLASHPP_SKIP_WITHOUT_GPU();
  if (!device_is_sm90()) GTEST_SKIP() << "the sm90 family runs on compute capability 9.0 only";
  const FamilyGuard guard("sm90");
  auto window = [](std::int64_t left, std::int64_t right, Alignment a) {
    Options o;
    o.window_left = left;
    o.window_right = right;
    o.alignment = a;
    return o;
  };
  struct Case {
    AttentionCase c;
    const char* tall;  // FLASHPP_SM90_FWD_TALL for it ("" = the rule)
  };
  const std::vector<Case> cases = {
      // 1000 = 5 x 192 + 40: a shift of 128 rows (two warpgroups) in the tall tile.
      {make_case(1, 1000, 1000, 2, 1, 64, DType::bf16, Layout::bnhd, causal(Alignment::top_left)), "1"},
      // 4096 = 21 x 192 + 64 (the benchmark's length, shorter keys): a shift of 128.
      {make_case(1, 4096, 700, 1, 1, 64, DType::f16, Layout::bhnd, causal(Alignment::bottom_right)), ""},
      // A window on both sides narrower than the tall tile's 192 rows.
      {make_case(1, 700, 900, 2, 2, 64, DType::f16, Layout::bnhd, window(100, 30, Alignment::top_left)), "1"},
      {make_case(2, 333, 600, 2, 1, 64, DType::bf16, Layout::bhnd, window(40, 0, Alignment::bottom_right)), "1"},
      // The two-warpgroup tiles: 777 = 6 x 128 + 9 (a shift of 64), a local causal window.
      {make_case(1, 777, 777, 2, 1, 128, DType::bf16, Layout::bnhd, window(64, 0, Alignment::top_left)), ""},
      {make_case(1, 500, 1300, 3, 1, 96, DType::f16, Layout::bnhd, causal(Alignment::bottom_right)), ""},
      {make_case(1, 300, 450, 1, 1, 256, DType::bf16, Layout::bhnd, window(70, 10, Alignment::bottom_right)), ""},
  };
  for (const char* shift : {"", "0"})
  for (const char* max_blocks : {"", "2"}) {
    std::optional<gpu_test::ScopedEnv> shift_env;
    if (shift[0] != '\0') shift_env.emplace("FLASHPP_SM90_FWD_SHIFT", shift);
    const PersistentBlocks persistent(max_blocks);
    for (const Case& k : cases) {
      std::optional<gpu_test::ScopedEnv> tall_env;
      if (k.tall[0] != '\0') tall_env.emplace("FLASHPP_SM90_FWD_TALL", k.tall);
      SCOPED_TRACE(k.c.describe() + " shift '" + shift + "' max blocks '" + max_blocks + "'");
      gpu_test::expect_forward_matches_oracle(k.c, test::make_inputs(k.c));
      if (::testing::Test::HasFailure()) return;
    }
  }
}

// The split walk (src/cuda/sm90/forward/split_walk.hpp): without a mask, where the persistent
// grid's last round is partial, the last items are cut over their key tiles and each cut item's
// first piece is merged by the block of the next ticket. Each case against the float64 oracle
// with O poisoned (the runner) and, in test builds, the workspace's partial states poisoned;
// forward_workspace_size says whether the walk is planned (it is the size of the partial states
// exactly where the plan splits). FLASHPP_SM90_FWD_SPLIT=1 takes the walk wherever the plan can
// cut, =0 never (no workspace), unset the rule (items of 32 key tiles of 128 keys and more). Each
// case names its tile: the two-warpgroup one (128 x 128) or the tall one (192 x 64,
// FLASHPP_SM90_FWD_TALL=1).
struct SplitCase {
  AttentionCase c;
  const char* max_blocks;    // PersistentBlocks ("" = one block per SM)
  bool rule_splits = false;  // the rule takes the walk (default grid only)
  bool tall = false;
};

void expect_split_walk_cases(const std::vector<SplitCase>& cases) {
  const FamilyGuard guard("sm90");
  const Device gpu{DeviceType::cuda, 0};
  // The long-keys tile, which has no split walk, never takes these cases' place.
  const gpu_test::ScopedEnv long_keys("FLASHPP_SM90_FWD_LONG", "0");
  for (const SplitCase& k : cases) {
    const PersistentBlocks persistent(k.max_blocks);
    const gpu_test::ScopedEnv tile("FLASHPP_SM90_FWD_TALL", k.tall ? "1" : "0");
    const test::AttentionInputs in = test::make_inputs(k.c);
    Options options = k.c.options;
    options.backend = Backend::cuda;
    for (const char* split : {"1", "0", ""}) {
      if (split[0] == '\0' && k.max_blocks[0] != '\0') continue;
      std::optional<gpu_test::ScopedEnv> split_env;
      if (split[0] != '\0') split_env.emplace("FLASHPP_SM90_FWD_SPLIT", split);
      SCOPED_TRACE(k.c.describe() + " max blocks '" + k.max_blocks + "' split '" + split + "'" +
                   (k.tall ? " tall tile" : ""));
      const std::size_t bytes =
          forward_workspace_size(in.q.view(gpu), in.k.view(gpu), in.v.view(gpu), options);
      if (split[0] == '1' || (split[0] == '\0' && k.rule_splits)) {
        EXPECT_GT(bytes, 0u) << "the split walk is not planned for this case";
      } else {
        EXPECT_EQ(bytes, 0u);
      }
      // A case the rule splits runs the oracle once, under the rule (its float64 oracle is the
      // slow part: the forced pass takes the same plan, the stride walk is every other test's).
      if (k.rule_splits && split[0] != '\0') continue;
      gpu_test::expect_forward_matches_oracle(k.c, in);
      if (::testing::Test::HasFailure()) return;
    }
  }
}

// The long-keys tile at D 96 and 128 (tile_config.hpp: 192 rows, 80-key tiles, the plain kernel
// on the stride walk), forced (FLASHPP_SM90_FWD_TALL=1, FLASHPP_SM90_FWD_LONG=1) or by its rule (a
// call over min_keys keys that takes the tall tile): partial last key tiles (333 = 4 x 80 + 13,
// 1000 = 12 x 80 + 40), one whole key tile, fewer keys than a tile, GQA, D=120 rounded up, a last
// query tile with a warpgroup without rows (500 = 2 x 192 + 116); on the default grid and on two
// persistent blocks that walk every item; against the float64 oracle with O poisoned. Its calls
// ask for no split-walk workspace, which the tall tile's would.
TEST(ForwardSm90Small, LongKeysTile) {
  FLASHPP_SKIP_WITHOUT_GPU();
  if (!device_is_sm90()) GTEST_SKIP() << "the sm90 family runs on compute capability 9.0 only";
  const FamilyGuard guard("sm90");
  const gpu_test::ScopedEnv tall("FLASHPP_SM90_FWD_TALL", "1");
  struct Case {
    AttentionCase c;
    const char* long_keys;  // FLASHPP_SM90_FWD_LONG ("" = the rule)
  };
  const std::vector<Case> cases = {
      {make_case(1, 500, 333, 2, 1, 128, DType::bf16, Layout::bnhd), "1"},
      {make_case(2, 200, 1000, 4, 2, 128, DType::f16, Layout::bhnd), "1"},
      {make_case(1, 64, 80, 1, 1, 128, DType::bf16, Layout::bnhd), "1"},
      {make_case(1, 190, 7, 3, 3, 120, DType::f16, Layout::bnhd), "1"},
      {make_case(1, 300, 8192, 1, 1, 128, DType::bf16, Layout::bnhd), ""},
      // D=96 (96 columns in a 128-column panel pair); 700 = 8 x 80 + 60.
      {make_case(1, 450, 700, 3, 1, 96, DType::f16, Layout::bhnd), "1"},
      {make_case(1, 200, 4100, 1, 1, 96, DType::bf16, Layout::bnhd), ""},
  };
  for (const char* max_blocks : {"", "2"}) {
    const PersistentBlocks persistent(max_blocks);
    for (const Case& k : cases) {
      std::optional<gpu_test::ScopedEnv> long_env;
      if (k.long_keys[0] != '\0') long_env.emplace("FLASHPP_SM90_FWD_LONG", k.long_keys);
      SCOPED_TRACE(k.c.describe() + " max blocks '" + max_blocks + "' long '" + k.long_keys + "'");
      gpu_test::expect_forward_matches_oracle(k.c, test::make_inputs(k.c));
      if (::testing::Test::HasFailure()) return;
    }
  }
  // The workspace query: none for the long-keys tile, the split walk's for the tall one (on 5
  // blocks, where this call's 8 items leave a partial round to cut).
  const PersistentBlocks persistent("5");
  const AttentionCase c = make_case(1, 700, 1000, 2, 1, 128, DType::bf16, Layout::bnhd);
  const test::AttentionInputs in = test::make_inputs(c);
  const Device gpu{DeviceType::cuda, 0};
  Options options = c.options;
  options.backend = Backend::cuda;
  const gpu_test::ScopedEnv split("FLASHPP_SM90_FWD_SPLIT", "1");
  for (const char* long_keys : {"1", "0"}) {
    const gpu_test::ScopedEnv tile("FLASHPP_SM90_FWD_LONG", long_keys);
    const std::size_t bytes =
        forward_workspace_size(in.q.view(gpu), in.k.view(gpu), in.v.view(gpu), options);
    if (long_keys[0] == '1') {
      EXPECT_EQ(bytes, 0u) << "a workspace asked for the long-keys tile";
    } else {
      EXPECT_GT(bytes, 0u) << "the tall tile's split walk is not planned";
    }
  }
}

// Small grids (2, 3, 5 and 7 persistent blocks; also the sanitizer's shapes): pieces of one key
// tile, a partial last key tile (its element mask inside a piece), a last query tile leaving the
// second warpgroup without rows, GQA, a head dim rounded up to 128, every block cutting.
TEST(ForwardSm90Small, SplitWalk) {
  FLASHPP_SKIP_WITHOUT_GPU();
  if (!device_is_sm90()) GTEST_SKIP() << "the sm90 family runs on compute capability 9.0 only";
  expect_split_walk_cases({
      // 12 items of 8 key tiles (1000 = 7 x 128 + 104) on 5 blocks: 5 whole, 7 cut into runs.
      {make_case(1, 700, 1000, 2, 1, 128, DType::bf16, Layout::bnhd), "5"},
      // 12 items on 7 blocks: no whole round, every block cuts; fp16, a second warpgroup without
      // rows in each head's last tile (650 = 5 x 128 + 10).
      {make_case(1, 650, 1000, 2, 2, 128, DType::f16, Layout::bhnd), "7"},
      // Two key tiles per item on 3 blocks (8 items): runs of 5 and 6 steps; GQA 4:2.
      {make_case(1, 256, 200, 4, 2, 128, DType::bf16, Layout::bnhd), "3"},
      // 5 items of 3 tiles on 2 blocks; D=120 rounds up to the 128 tile.
      {make_case(1, 600, 300, 1, 1, 120, DType::f16, Layout::bnhd), "2"},
      // The tall tile: 4 x 2 = 8 items of 16 64-key tiles on 5 blocks, the third warpgroup of each
      // head's last query tile without rows (700 = 3 x 192 + 124).
      {make_case(1, 700, 1000, 2, 1, 128, DType::bf16, Layout::bnhd), "5", false, true},
  });
}

// The split walk in a CUDA graph: its flags are zeroed by a memset node in every replay, and its
// workspace is flashpp's own (a graph memory node) or the caller's. Each replay, with O poisoned
// before it, must give the eager call's O and lse bit for bit (the pieces and the merge run in
// the same order every time).
TEST(ForwardSm90Small, SplitWalkInCudaGraph) {
  FLASHPP_SKIP_WITHOUT_GPU();
  if (!device_is_sm90()) GTEST_SKIP() << "the sm90 family runs on compute capability 9.0 only";
  const FamilyGuard guard("sm90");
  const PersistentBlocks persistent("5");
  const gpu_test::ScopedEnv split("FLASHPP_SM90_FWD_SPLIT", "1");
  const AttentionCase c = make_case(1, 700, 1000, 2, 1, 128, DType::bf16, Layout::bnhd);
  const test::AttentionInputs in = test::make_inputs(c);
  const Device gpu{DeviceType::cuda, 0};
  auto upload = [](const test::HostTensor& t) {
    gpu_test::DeviceBuffer b(t.raw_bytes());
    cudaMemcpy(b.data(), t.raw(), t.raw_bytes(), cudaMemcpyHostToDevice);
    return b;
  };
  auto device_view = [&](const test::HostTensor& t, const gpu_test::DeviceBuffer& b) {
    TensorView v = t.view(gpu);
    v.data = b.data();
    return v;
  };
  const test::HostTensor o_host = in.q.like();
  const test::HostTensor lse_host =
      test::HostTensor::lse(DType::f32, in.q.size(0), in.q.size(2), in.q.size(1), in.q.layout());
  const gpu_test::DeviceBuffer q = upload(in.q), k = upload(in.k), v = upload(in.v);
  const gpu_test::DeviceBuffer o(o_host.raw_bytes()), lse(lse_host.raw_bytes());
  const TensorView Q = device_view(in.q, q), K = device_view(in.k, k), V = device_view(in.v, v);
  const TensorView O = device_view(o_host, o), L = device_view(lse_host, lse);
  Options options = c.options;
  options.backend = Backend::cuda;
  const std::size_t bytes = forward_workspace_size(Q, K, V, options);
  ASSERT_GT(bytes, 0u) << "the split walk is not planned for this case";
  const gpu_test::DeviceBuffer workspace(bytes);

  cudaStream_t stream = nullptr;
  FLASHPP_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  o.fill_bytes(0xFF);
  lse.fill_bytes(0xFF);
  forward(Q, K, V, O, L, options, stream);
  FLASHPP_CUDA_OK(cudaStreamSynchronize(stream));
  const auto o_eager = o.download<std::uint16_t>(o.bytes() / 2);
  const auto lse_eager = lse.download<std::uint32_t>(lse.bytes() / 4);
  {  // the eager result is the oracle's (and so no element is left poisoned)
    SCOPED_TRACE("eager call");
    gpu_test::expect_forward_matches_oracle(c, in);
  }
  for (const bool own_workspace : {false, true}) {
    SCOPED_TRACE(own_workspace ? "caller's workspace" : "flashpp's workspace");
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    FLASHPP_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    forward(Q, K, V, O, L, options, stream,
            own_workspace ? Workspace{workspace.data(), workspace.bytes()} : Workspace{});
    FLASHPP_CUDA_OK(cudaStreamEndCapture(stream, &graph));
    FLASHPP_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    for (int replay = 0; replay < 3; ++replay) {
      FLASHPP_CUDA_OK(cudaMemsetAsync(o.data(), 0xFF, o.bytes(), stream));
      FLASHPP_CUDA_OK(cudaMemsetAsync(lse.data(), 0xFF, lse.bytes(), stream));
      FLASHPP_CUDA_OK(cudaGraphLaunch(exec, stream));
      FLASHPP_CUDA_OK(cudaStreamSynchronize(stream));
      EXPECT_TRUE(o.download<std::uint16_t>(o.bytes() / 2) == o_eager) << "replay " << replay;
      EXPECT_TRUE(lse.download<std::uint32_t>(lse.bytes() / 4) == lse_eager) << "replay " << replay;
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
  cudaStreamDestroy(stream);
}

// The default grid (one block per SM; more items than an H100's or H200's 132 SMs, and than the
// 114 of an H100 PCIe): under the rule, no walk at 5 key tiles an item, the walk at 32.
TEST(ForwardSm90SplitWalk, DefaultGrid) {
  FLASHPP_SKIP_WITHOUT_GPU();
  if (!device_is_sm90()) GTEST_SKIP() << "the sm90 family runs on compute capability 9.0 only";
  expect_split_walk_cases({
      // 36 x 4 = 144 items of 5 key tiles, Nq != Nk.
      {make_case(1, 4500, 600, 4, 4, 128, DType::bf16, Layout::bnhd), ""},
      // 35 x 4 = 140 items of 32 key tiles (4000 = 31 x 128 + 32), GQA 4:1: the rule's split.
      {make_case(1, 4400, 4000, 4, 1, 128, DType::f16, Layout::bnhd), "", true},
      // The tall tile: 11 x 13 = 143 items of 63 64-key tiles, MQA: the rule's split.
      {make_case(1, 2000, 4000, 13, 1, 128, DType::f16, Layout::bnhd), "", true, true},
  });
}

}  // namespace
}  // namespace flashpp
