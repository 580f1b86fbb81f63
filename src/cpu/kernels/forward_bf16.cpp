// The bf16 forward on the CPU's bf16 matrix units: compiled three times (CMakeLists.txt), as the
// AVX512-BF16 engine (vdpbf16ps: 16 lanes x 2-element dot products into float32), as the
// AMX engine (tdpbf16ps: 16 x 16 float32 tiles += 16 x 32 bf16 times 32 x 16 bf16), and as the
// AMX engine on emulated tiles (AVX2 build, FLASHPP_AMX_EMULATION: for the tests on machines
// without AMX). All run the same FlashAttention-2 loop; only the tile product differs
// (bf16_product.hpp); the element-wise steps use 16-lane vectors (vec16.hpp).
//
// Orientation: query-major (queries are rows, keys along the lanes), unlike the float32
// kernels, because both products then take their A operand as plain bf16 rows:
//   S   = Q_i K_j^T      A = Q_i rows (the input's bf16, copied),  B = K_j^T packed
//   O  += P~ V_j         A = P~ rows (float32 probabilities rounded to bf16), B = V_j packed
// B operands are in the "VNNI" layout both instructions read: 32-bit words holding a pair of
// bf16 consecutive along the reduction dimension, row = pair index, column = output column.
// K^T and V are packed into it once per call for the whole kv head (a pre-pass, parallel over
// kv heads x key tiles; as much memory as K and V in bf16), so every query tile streams packed
// tiles without transposing anything.
//
// Accuracy: the scores and the softmax statistics (m, l, lse) are float32 from bf16 inputs,
// exact products with float32 accumulation; the one extra rounding is P~ to bf16 before
// the P~V product (relative 2^-9 per probability, unbiased: O's error stays at the level of
// its own bf16 storage rounding; l is summed from the unrounded probabilities, as the GPU
// kernels do).
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "../bf16_pack.hpp"
#include "../bf16_product.hpp"
#include "../cpu_backend.hpp"
#include "../forward_output.hpp"
#include "../tile_dropout.hpp"
#include "../tile_io.hpp"
#include "../tile_scratch.hpp"
#include "../tile_softmax.hpp"
#include "../vec16.hpp"

namespace flashpp::cpu::FLASHPP_CPU_KERNEL_NAMESPACE {
namespace {

// Tile shape (FLASHPP_CPU_BF16_FWD_ROWS / _KEYS override it, for A/B builds): queries per task and
// keys per tile. The per-row work that does not scale with the keys (two horizontal reductions,
// the scalar exp of the rescale, O's rescale in memory, the C tiles of O loaded and stored by
// the P~V product) is paid once per key tile. GPU host's Xeon (AMX, session 16, N=4096, D=128,
// with the base-2 softmax, 2 and 16 threads, causal and not): against 128 x 64, 128 x 128 ran
// 1.07-1.18x, 128 x 256 1.02-1.18x, 64 x 128 1.03-1.12x, 64 x 256 1.01-1.08x (docs/cpu-backend.md).
#ifndef FLASHPP_CPU_BF16_FWD_ROWS
#define FLASHPP_CPU_BF16_FWD_ROWS 128
#endif
#ifndef FLASHPP_CPU_BF16_FWD_KEYS
#define FLASHPP_CPU_BF16_FWD_KEYS 128
#endif
constexpr std::int64_t kQueryRows = FLASHPP_CPU_BF16_FWD_ROWS;
constexpr std::int64_t kKeys = FLASHPP_CPU_BF16_FWD_KEYS;
constexpr int kKeyVecs = static_cast<int>(kKeys / 16);  // the lanes of a row of S
static_assert(kQueryRows % 32 == 0 && kKeys % 32 == 0 && kKeys <= 256,
              "tile products take multiples of 32; a row of S stays in registers");

// ---- packing K^T and V (once per call) -------------------------------------------------------------

struct PackedKv {
  std::int64_t Dp = 0, tiles = 0;
  std::int64_t tile_words = 0;  // per packed tile: Dp * kKeys / 2
  const std::uint32_t* words = nullptr;  // in the call's PackedBlock
  // K_j^T: word (d/2, c) at kt(...)[(d/2) * kKeys + c];  V_j: word (c/2, d) at v(...)[(c/2) * Dp + d]
  const std::uint32_t* kt(std::int64_t bhk, std::int64_t t) const {
    return words + (bhk * tiles + t) * 2 * tile_words;
  }
  const std::uint32_t* v(std::int64_t bhk, std::int64_t t) const { return kt(bhk, t) + tile_words; }
};

void pack_tile(const detail::ForwardArgs& a, const PackedKv& pk, std::int64_t b, std::int64_t hk,
               std::int64_t t) {
  const detail::Problem& p = a.problem;
  const std::int64_t j0 = t * kKeys, rows = std::min(kKeys, p.Nk - j0);
  auto* kt = const_cast<std::uint32_t*>(pk.kt(b * p.Hkv + hk, t));
  auto* vv = const_cast<std::uint32_t*>(pk.v(b * p.Hkv + hk, t));
  auto k_row = [&](std::int64_t c) {
    return static_cast<const std::uint16_t*>(element_ptr(a.k, detail::offset4(a.k, b, j0 + c, hk, 0)));
  };
  auto v_row = [&](std::int64_t c) {
    return static_cast<const std::uint16_t*>(element_ptr(a.v, detail::offset4(a.v, b, j0 + c, hk, 0)));
  };
  pack_pairs_along_d(k_row, rows, kKeys, kKeys, p.D, pk.Dp, kt);
  pack_pairs_along_rows(v_row, rows, kKeys, pk.Dp, p.D, pk.Dp, vv);
}

// ---- one query tile -------------------------------------------------------------------------------

struct Bf16Scratch {
  explicit Bf16Scratch(std::int64_t Dp)
      : q(kQueryRows * Dp / 2), s(kQueryRows * kKeys), p(kQueryRows * kKeys / 2),
        z(kQueryRows * kKeys), o(kQueryRows * Dp), m(kQueryRows), l(kQueryRows) {
    // Dropout factors are written for the real keys of a tile only; the lanes beyond stay 0
    // (their probabilities are 0, and 0 * garbage could be NaN).
    std::memset(z.get(), 0, sizeof(float) * kQueryRows * kKeys);
  }
  ScratchTile q;  // [kQueryRows][Dp] bf16
  ScratchTile s;  // [kQueryRows][kKeys] float32 scores
  ScratchTile p;  // [kQueryRows][kKeys] bf16 probabilities
  ScratchTile z;  // [kQueryRows][kKeys] dropout factors
  ScratchTile o;  // [kQueryRows][Dp] unnormalised output
  ScratchTile m, l;
};

void forward_query_tile(const detail::ForwardArgs& a, const PackedKv& pk, std::int64_t b,
                        std::int64_t h, std::int64_t i0, Bf16Scratch& w) {
  const detail::Problem& p = a.problem;
  const std::int64_t D = p.D, Dp = pk.Dp;
  const std::int64_t hk = h / p.heads_per_kv(), bhk = b * p.Hkv + hk;
  const std::int64_t q_rows = std::min(kQueryRows, p.Nq - i0);
  const std::int64_t m_rows = round_up(q_rows, 32);
  const auto bh = static_cast<std::uint32_t>(b * p.Hq + h);
  auto* q = reinterpret_cast<std::uint16_t*>(w.q.get());
  auto* pb = reinterpret_cast<std::uint16_t*>(w.p.get());
  float* s = w.s.get();
  float* o = w.o.get();
  float* m = w.m.get();
  float* l = w.l.get();
  std::memset(q, 0, sizeof(std::uint16_t) * m_rows * Dp);
  for (std::int64_t r = 0; r < q_rows; ++r) {
    std::memcpy(q + r * Dp, element_ptr(a.q, detail::offset4(a.q, b, i0 + r, h, 0)), D * 2);
  }
  std::memset(pb, 0, sizeof(std::uint16_t) * m_rows * kKeys);
  std::memset(o, 0, sizeof(float) * m_rows * Dp);
  for (std::int64_t r = 0; r < q_rows; ++r) {
    m[r] = kNegInf;
    l[r] = 0.0f;
  }

  const bool masked = p.mask.active();
  const bool capped = p.softcap > 0.0f;
  // The softmax runs in base-2 units: the exponent of a probability is y = x * c - m with
  // c = scale * log2(e) (one FMA), m the row's running maximum of x * c, and 2^y (exp2_16)
  // needs no reduction by ln 2. The maximum is taken over the raw scores x and scaled once per
  // row (c > 0). Soft-capped scores (and a scale <= 0) are mapped first, then c = 1.
  const float to_log2 = p.scale * kLog2e;
  const bool premapped = capped || !(to_log2 > 0.0f);
  const F32x16 row_scale = set16(premapped ? 1.0f : to_log2);
  const F32x16 neg_inf = set16(kNegInf);
  for (std::int64_t t = 0; t < pk.tiles; ++t) {
    const std::int64_t j0 = t * kKeys, j1 = std::min(j0 + kKeys, p.Nk);
    if (masked && p.mask.tile_fully_hidden(i0, i0 + q_rows, j0, j1)) continue;
    const std::int64_t kv_rows = j1 - j0;
    const bool element_mask = masked && !p.mask.tile_fully_visible(i0, i0 + q_rows, j0, j1);
    const bool hidden_lanes = element_mask || kv_rows < kKeys;

    bf16_tile_product(m_rows, kKeys, Dp, q, Dp, pk.kt(bhk, t), kKeys, s, kKeys, false);
    if (p.dropout.enabled()) {
      dropout_factors_query_major(w.z.get(), kKeys, q_rows, kv_rows, i0, j0, bh, p.dropout);
    }
    LaneMask16 all_keys[kKeyVecs];
    visible_lanes<kKeyVecs>(0, kv_rows - 1, all_keys);
    for (std::int64_t r = 0; r < q_rows; ++r) {
      float* srow = s + r * kKeys;
      F32x16 x[kKeyVecs];
      for (int v = 0; v < kKeyVecs; ++v) x[v] = load16(srow + 16 * v);
      if (premapped) {
        if (capped) {
          const F32x16 cap = set16(p.softcap * kLog2e), inv = set16(p.scale / p.softcap);
          for (int v = 0; v < kKeyVecs; ++v) x[v] = cap * tanh16(x[v] * inv);
        } else {
          for (int v = 0; v < kKeyVecs; ++v) x[v] = x[v] * set16(to_log2);
        }
      }
      if (hidden_lanes) {
        LaneMask16 keep[kKeyVecs];
        for (int v = 0; v < kKeyVecs; ++v) keep[v] = all_keys[v];
        if (element_mask) {
          const std::int64_t i = i0 + r;
          const std::int64_t first = std::max<std::int64_t>(i + p.mask.shift - p.mask.left - j0, 0);
          const std::int64_t last = std::min<std::int64_t>(i + p.mask.shift + p.mask.right - j0, kv_rows - 1);
          visible_lanes<kKeyVecs>(first, last, keep);
        }
        for (int v = 0; v < kKeyVecs; ++v) x[v] = select16(keep[v], x[v], neg_inf);
      }
      F32x16 tile_max = x[0];
      for (int v = 1; v < kKeyVecs; ++v) tile_max = max16(tile_max, x[v]);
      const float m_old = m[r];
      const float m_new = std::max(m_old, reduce_max16(tile_max * row_scale));
      const float ref = m_new == kNegInf ? 0.0f : m_new;
      const float alpha = exp2_scalar(m_old - ref);
      const F32x16 vref = set16(ref);
      F32x16 sum = zero16();
      for (int v = 0; v < kKeyVecs; ++v) {
        x[v] = exp2_16(fmsub16(x[v], row_scale, vref));
        sum = sum + x[v];
      }
      l[r] = alpha * l[r] + reduce_add16(sum);  // before dropout: the lse ignores it
      m[r] = m_new;
      if (p.dropout.enabled()) {
        for (int v = 0; v < kKeyVecs; ++v) x[v] = x[v] * load16(w.z.get() + r * kKeys + 16 * v);
      }
      for (int v = 0; v < kKeyVecs; ++v) store16_bf16(pb + r * kKeys + 16 * v, x[v]);
      if (alpha != 1.0f) {
        float* orow = o + r * Dp;
        const F32x16 va = set16(alpha);
        for (std::int64_t d = 0; d < Dp; d += 16) store16(orow + d, load16(orow + d) * va);
      }
    }
    bf16_tile_product(m_rows, Dp, kKeys, pb, kKeys, pk.v(bhk, t), Dp, o, Dp, true);
  }

  store_forward_rows(a, b, h, i0, q_rows, o, Dp, m, l);
}

}  // namespace

void flash_forward_bf16(const detail::ForwardArgs& a) {
  const detail::Problem& p = a.problem;
  if (p.B == 0 || p.Hq == 0 || p.Nq == 0) return;
  PackedKv pk;
  pk.Dp = round_up(p.D, 32);
  pk.tiles = (p.Nk + kKeys - 1) / kKeys;
  pk.tile_words = pk.Dp * kKeys / 2;
  const std::int64_t kv_heads = p.B * p.Hkv;
  const std::size_t bytes =
      round_up(kv_heads * pk.tiles * 2 * pk.tile_words * 4, 64);
  PackedBlock block;
  if (!block.allocate(bytes)) throw_scratch_allocation_failure("flashpp::forward");
  pk.words = block.at<std::uint32_t>(0);
  const std::int64_t pack_tasks = kv_heads * pk.tiles;
#pragma omp parallel for schedule(static)
  for (std::int64_t x = 0; x < pack_tasks; ++x) {
    const std::int64_t bhk = x / pk.tiles;
    pack_tile(a, pk, bhk / p.Hkv, bhk % p.Hkv, x % pk.tiles);
  }

  const std::int64_t q_tiles = (p.Nq + kQueryRows - 1) / kQueryRows;
  const std::int64_t tasks = p.B * p.Hq * q_tiles;
  std::atomic<bool> out_of_memory{false};
#pragma omp parallel
  {
    const auto scratch = make_thread_scratch<Bf16Scratch>(out_of_memory, pk.Dp);
#pragma omp barrier
    if (!out_of_memory) bf16_engine_begin();
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t t = 0; t < tasks; ++t) {
      if (out_of_memory) continue;
      const std::int64_t tile = q_tiles - 1 - t % q_tiles;  // longest (causal) first
      const std::int64_t bh = t / q_tiles;
      forward_query_tile(a, pk, bh / p.Hq, bh % p.Hq, tile * kQueryRows, *scratch);
    }
    if (!out_of_memory) bf16_engine_end();
  }
  throw_if_out_of_memory(out_of_memory, "flashpp::forward");
}

}  // namespace flashpp::cpu::FLASHPP_CPU_KERNEL_NAMESPACE
