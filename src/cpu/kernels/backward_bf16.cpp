// The bf16 backward on the CPU's bf16 matrix units (compiled with forward_bf16.cpp: AMX tiles,
// AMX on emulated tiles, AVX512-BF16 dot products; bf16_product.hpp). All five products of a
// (query tile, key tile) pair take bf16 operands and accumulate in float32:
//
//   S     = Q_i K_j^T        A = Q_i rows            B = K_j^T  (pairs along d)   per call
//   dP    = dO_i V_j^T       A = dO_i rows           B = V_j^T  (pairs along d)   per call
//   dV_j^T += dO_i^T P~      A = dO_i^T rows         B = P~     (pairs of query rows)
//   dK_j^T += Q_i^T dS       A = Q_i^T rows          B = dS     (pairs of query rows)
//   dQ_i  += dS K_j          A = dS rows (bf16)      B = K_j    (pairs of key rows) per call
//
// Orientation: query-major (a query per row, 64 keys along the lanes), as in the forward, so
// that lse and D are one scalar per row. The two products that reduce over queries compute
// dV^T and dK^T (d per row, keys along the columns): their B operand is then P~ or dS in pairs
// of consecutive query rows, which the element-wise pass writes directly (two rows rounded to
// bf16 and interleaved), and their A operand is Q_i^T / dO_i^T, transposed once per query tile.
// Nothing is transposed per pair.
//
// Schedule (deterministic: no floating-point atomics, every sum in a fixed order): one task per
// (batch, kv head, split s). A task walks the (query head of the group, query tile) units whose
// index is s modulo `splits`, and for each unit every visible key tile; it owns dQ of its units
// (written once per query tile) and accumulates dK^T, dV^T of the whole kv head in float32
// buffers of its own. A second parallel loop adds the splits' buffers in split order and writes
// dK, dV. splits = 1 unless B x Hkv tasks would leave threads idle or unbalanced (splits > 1
// costs one more pair of Nk x D float32 buffers per split, capped in memory).
//
// Memory: K^T, V^T and K packed per call (3x K in bf16), the dK^T/dV^T accumulators
// (2 x splits x K in float32), and O(tile) scratch per thread.
//
// Accuracy: S and dP are exact bf16 products summed in float32. P~ and dS are rounded to bf16
// (round to nearest even, relative 2^-9) before the three products that read them; lse, D and
// the softmax recomputation stay float32.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>

#include <omp.h>

#include "../backward_steps.hpp"
#include "../bf16_pack.hpp"
#include "../bf16_product.hpp"
#include "../cpu_backend.hpp"
#include "../tile_dropout.hpp"
#include "../tile_io.hpp"
#include "../tile_scratch.hpp"
#include "../tile_softmax.hpp"
#include "../vec16.hpp"

namespace flashpp::cpu::FLASHPP_CPU_KERNEL_NAMESPACE {
namespace {

constexpr std::int64_t kQueryRows = 128;  // queries per unit (a multiple of 32)
constexpr std::int64_t kKeys = 64;        // keys per tile: the lanes of S, dP (4 vectors)

// Call-wide buffers: the packed key-side operands and the dK^T / dV^T accumulators.
struct PackedKeys {
  std::int64_t Dp = 0, tiles = 0, Nk_pad = 0, splits = 1;
  std::int64_t tile_words = 0;  // Dp * kKeys / 2 per operand and tile
  const std::uint32_t* words = nullptr;  // both in the call's PackedBlock
  float* acc = nullptr;
  // K_j^T, V_j^T: word (d/2, c) at [(d/2) * kKeys + c];  K_j: word (c/2, d) at [(c/2) * Dp + d]
  const std::uint32_t* kt(std::int64_t bhk, std::int64_t t) const {
    return words + (bhk * tiles + t) * 3 * tile_words;
  }
  const std::uint32_t* vt(std::int64_t bhk, std::int64_t t) const { return kt(bhk, t) + tile_words; }
  const std::uint32_t* k_pairs(std::int64_t bhk, std::int64_t t) const {
    return kt(bhk, t) + 2 * tile_words;
  }
  // dK^T of (kv head, split): [Dp][Nk_pad] float32, dV^T right after it.
  float* dkt(std::int64_t bhk, std::int64_t s) const {
    return acc + (bhk * splits + s) * 2 * Dp * Nk_pad;
  }
  float* dvt(std::int64_t bhk, std::int64_t s) const { return dkt(bhk, s) + Dp * Nk_pad; }
};

const std::uint16_t* bf16_row(const TensorView& t, std::int64_t b, std::int64_t n, std::int64_t h) {
  return static_cast<const std::uint16_t*>(element_ptr(t, detail::offset4(t, b, n, h, 0)));
}

void pack_key_tile(const detail::BackwardArgs& a, const PackedKeys& pk, std::int64_t bhk,
                   std::int64_t t) {
  const detail::Problem& p = a.problem;
  const std::int64_t b = bhk / p.Hkv, hk = bhk % p.Hkv;
  const std::int64_t j0 = t * kKeys, rows = std::min(kKeys, p.Nk - j0);
  auto k_row = [&](std::int64_t c) { return bf16_row(a.k, b, j0 + c, hk); };
  auto v_row = [&](std::int64_t c) { return bf16_row(a.v, b, j0 + c, hk); };
  pack_pairs_along_d(k_row, rows, kKeys, kKeys, p.D, pk.Dp, const_cast<std::uint32_t*>(pk.kt(bhk, t)));
  pack_pairs_along_d(v_row, rows, kKeys, kKeys, p.D, pk.Dp, const_cast<std::uint32_t*>(pk.vt(bhk, t)));
  pack_pairs_along_rows(k_row, rows, kKeys, pk.Dp, p.D, pk.Dp,
                        const_cast<std::uint32_t*>(pk.k_pairs(bhk, t)));
}

struct Bf16BackwardScratch {
  explicit Bf16BackwardScratch(std::int64_t Dp)
      : q(kQueryRows * Dp / 2), dout(kQueryRows * Dp / 2), q_t(kQueryRows * Dp / 2),
        dout_t(kQueryRows * Dp / 2), s(std::max(kQueryRows, Dp) * kKeys),
        dp(std::max(kQueryRows, Dp) * kKeys),
        z(kQueryRows * kKeys), p_pairs(kQueryRows * kKeys / 2), ds_pairs(kQueryRows * kKeys / 2),
        ds_rows(kQueryRows * kKeys / 2), dq(kQueryRows * Dp), lse(kQueryRows), d_rows(kQueryRows) {
    // Dropout factors are written for the real elements of a tile only; the rest stay 0.
    std::memset(z.get(), 0, sizeof(float) * kQueryRows * kKeys);
  }
  ScratchTile q, dout;       // [kQueryRows][Dp] bf16: A of S and dP
  ScratchTile q_t, dout_t;   // [Dp][kQueryRows] bf16: A of dK^T and dV^T
  ScratchTile s, dp, z;      // [kQueryRows][kKeys] float32 (s, dp: also [kKeys][Dp] at the end)
  ScratchTile p_pairs;       // [kQueryRows/2][kKeys] VNNI words of P~
  ScratchTile ds_pairs;      // [kQueryRows/2][kKeys] VNNI words of dS
  ScratchTile ds_rows;       // [kQueryRows][kKeys] bf16 dS
  ScratchTile dq;            // [kQueryRows][Dp] float32 accumulator
  ScratchTile lse, d_rows;   // per query row
};

// P~ and dS of one query row (4 x 16 keys): zero for padding rows.
struct RowGradients {
  F32x16 p_tilde[4], ds[4];
};

// One query tile (rows i0 .. i0+q_rows-1 of query head h) against every visible key tile.
void backward_query_unit(const detail::BackwardArgs& a, const float* d_rows_all,
                         const PackedKeys& pk, std::int64_t b, std::int64_t h, std::int64_t i0,
                         float* dkt, float* dvt, Bf16BackwardScratch& w) {
  const detail::Problem& p = a.problem;
  const std::int64_t D = p.D, Dp = pk.Dp;
  const std::int64_t hk = h / p.heads_per_kv(), bhk = b * p.Hkv + hk;
  const std::int64_t q_rows = std::min(kQueryRows, p.Nq - i0);
  const std::int64_t m_rows = round_up(q_rows, 32);
  const auto bh = static_cast<std::uint32_t>(b * p.Hq + h);
  auto* q = reinterpret_cast<std::uint16_t*>(w.q.get());
  auto* dout = reinterpret_cast<std::uint16_t*>(w.dout.get());
  auto* q_t = reinterpret_cast<std::uint16_t*>(w.q_t.get());
  auto* dout_t = reinterpret_cast<std::uint16_t*>(w.dout_t.get());
  auto* p_pairs = reinterpret_cast<std::uint32_t*>(w.p_pairs.get());
  auto* ds_pairs = reinterpret_cast<std::uint32_t*>(w.ds_pairs.get());
  auto* ds_rows = reinterpret_cast<std::uint16_t*>(w.ds_rows.get());
  float* s = w.s.get();
  float* dp = w.dp.get();
  float* dq = w.dq.get();
  float* lse = w.lse.get();
  float* drow = w.d_rows.get();

  auto q_row = [&](std::int64_t r) { return bf16_row(a.q, b, i0 + r, h); };
  auto do_row = [&](std::int64_t r) { return bf16_row(a.dout, b, i0 + r, h); };
  pack_rows(q_row, q_rows, m_rows, Dp, D, Dp, q);
  pack_rows(do_row, q_rows, m_rows, Dp, D, Dp, dout);
  pack_rows_transposed(q_row, q_rows, m_rows, kQueryRows, D, Dp, q_t);
  pack_rows_transposed(do_row, q_rows, m_rows, kQueryRows, D, Dp, dout_t);
  load_lse(a, b, h, i0, q_rows, m_rows, lse);
  load_output_dot(d_rows_all, p, b, h, i0, q_rows, m_rows, drow);
  std::memset(dq, 0, sizeof(float) * m_rows * Dp);

  const bool masked = p.mask.active();
  const bool capped = p.softcap > 0.0f;
  const bool dropout = p.dropout.enabled();
  const F32x16 vscale = set16(p.scale);
  const F32x16 vlog2e = set16(kLog2e), vscale2 = set16(p.scale * kLog2e);  // base 2: load_lse
  const F32x16 neg_inf = set16(kNegInf);
  const F32x16 zero = zero16();
  for (std::int64_t t = 0; t < pk.tiles; ++t) {
    const std::int64_t j0 = t * kKeys, j1 = std::min(j0 + kKeys, p.Nk);
    if (masked && p.mask.tile_fully_hidden(i0, i0 + q_rows, j0, j1)) continue;
    const std::int64_t kv_rows = j1 - j0;
    const bool element_mask = masked && !p.mask.tile_fully_visible(i0, i0 + q_rows, j0, j1);

    bf16_tile_product(m_rows, kKeys, Dp, q, Dp, pk.kt(bhk, t), kKeys, s, kKeys, false);
    bf16_tile_product(m_rows, kKeys, Dp, dout, Dp, pk.vt(bhk, t), kKeys, dp, kKeys, false);
    if (dropout) dropout_factors_query_major(w.z.get(), kKeys, q_rows, kv_rows, i0, j0, bh, p.dropout);

    LaneMask16 all_keys[4];
    visible_lanes64(0, kv_rows - 1, all_keys);
    auto row_gradients = [&](std::int64_t r, RowGradients& g) {
      if (r >= q_rows) {
        for (int v = 0; v < 4; ++v) g.p_tilde[v] = g.ds[v] = zero;
        return;
      }
      LaneMask16 keep[4] = {all_keys[0], all_keys[1], all_keys[2], all_keys[3]};
      if (element_mask) {
        const std::int64_t i = i0 + r;
        const std::int64_t first = std::max<std::int64_t>(i + p.mask.shift - p.mask.left - j0, 0);
        const std::int64_t last = std::min<std::int64_t>(i + p.mask.shift + p.mask.right - j0, kv_rows - 1);
        visible_lanes64(first, last, keep);
      }
      const F32x16 row_lse = set16(lse[r]), row_d = set16(drow[r]);
      for (int v = 0; v < 4; ++v) {
        F32x16 x = load16(s + r * kKeys + 16 * v);
        F32x16 cap_factor = zero;
        F32x16 to_log2 = vscale2;  // x * to_log2 - lse: the exponent of P in base 2
        if (capped) {
          x = x * vscale;
          to_log2 = vlog2e;
          // x = cap tanh(x / cap); dS gets the factor 1 - (x / cap)^2 (|x / cap| <= 1)
          const F32x16 inv = set16(1.0f / p.softcap);
          const F32x16 th = tanh16(x * inv);
          x = set16(p.softcap) * th;
          const F32x16 one = set16(1.0f);
          const F32x16 t_c = min16(max16(th, set16(-1.0f)), one);
          cap_factor = fnmadd16(t_c, t_c, one);
        }
        x = select16(keep[v], x, neg_inf);
        // lse = +inf for a row that sees nothing: P = 0
        const F32x16 prob = exp2_16(fmsub16(x, to_log2, row_lse));
        F32x16 dpv = load16(dp + r * kKeys + 16 * v);
        F32x16 p_tilde = prob;
        if (dropout) {
          const F32x16 zv = load16(w.z.get() + r * kKeys + 16 * v);
          p_tilde = prob * zv;
          dpv = dpv * zv;
        }
        F32x16 ds = prob * (dpv - row_d);
        if (capped) ds = ds * cap_factor;
        g.p_tilde[v] = p_tilde;
        g.ds[v] = ds;
      }
    };
    for (std::int64_t r = 0; r < m_rows; r += 2) {
      RowGradients even, odd;
      row_gradients(r, even);
      row_gradients(r + 1, odd);
      for (int v = 0; v < 4; ++v) {
        store16_bf16_pairs(p_pairs + (r / 2) * kKeys + 16 * v, even.p_tilde[v], odd.p_tilde[v]);
        store16_bf16_pairs(ds_pairs + (r / 2) * kKeys + 16 * v, even.ds[v], odd.ds[v]);
        store16_bf16(ds_rows + r * kKeys + 16 * v, even.ds[v]);
        store16_bf16(ds_rows + (r + 1) * kKeys + 16 * v, odd.ds[v]);
      }
    }

    // dV^T[:, j0..] += dO^T P~;  dK^T[:, j0..] += Q^T dS  (reduction over the m_rows queries)
    bf16_tile_product(Dp, kKeys, m_rows, dout_t, kQueryRows, p_pairs, kKeys, dvt + j0, pk.Nk_pad, true);
    bf16_tile_product(Dp, kKeys, m_rows, q_t, kQueryRows, ds_pairs, kKeys, dkt + j0, pk.Nk_pad, true);
    // dQ += dS K_j  (reduction over the tile's keys; scale applied on store)
    bf16_tile_product(m_rows, Dp, kKeys, ds_rows, kKeys, pk.k_pairs(bhk, t), Dp, dq, Dp, true);
  }
  for (std::int64_t r = 0; r < q_rows; ++r) {
    convert_from_f32(dq + r * Dp, D, a.dq.dtype,
                     element_ptr_mut(a.dq, detail::offset4(a.dq, b, i0 + r, h, 0)), p.scale);
  }
}

// Splits of each kv head's query units: enough tasks to occupy and balance the threads, within
// a memory cap for the extra accumulators.
std::int64_t choose_splits(const detail::Problem& p, std::int64_t units, std::int64_t acc_bytes) {
  const std::int64_t threads = omp_get_max_threads();
  const std::int64_t kv = p.B * p.Hkv;
  constexpr std::int64_t kMaxExtraBytes = std::int64_t(256) << 20;
  std::int64_t splits = 1;
  while (splits < units && !(kv * splits >= 4 * threads || (kv * splits) % threads == 0) &&
         kv * (splits + 1) * acc_bytes <= std::max(kMaxExtraBytes, kv * acc_bytes)) {
    ++splits;
  }
  return splits;
}

}  // namespace

// d_rows: B x Hq x Nq floats for D = rowsum(dO * O) (src/cpu/dispatch.cpp provides them).
void flash_backward_bf16(const detail::BackwardArgs& a, float* d_rows) {
  const detail::Problem& p = a.problem;
  if (p.B == 0 || p.Hq == 0) return;
  compute_output_dot(a, d_rows);

  PackedKeys pk;
  pk.Dp = round_up(p.D, 32);
  pk.tiles = (p.Nk + kKeys - 1) / kKeys;
  pk.Nk_pad = pk.tiles * kKeys;
  pk.tile_words = pk.Dp * kKeys / 2;
  const std::int64_t kv_heads = p.B * p.Hkv, hpk = p.heads_per_kv();
  const std::int64_t q_tiles = (p.Nq + kQueryRows - 1) / kQueryRows;
  const std::int64_t units = hpk * q_tiles;  // (query head, query tile) per kv head
  const std::int64_t acc_bytes = 2 * pk.Dp * pk.Nk_pad * static_cast<std::int64_t>(sizeof(float));
  pk.splits = choose_splits(p, std::max<std::int64_t>(units, 1), acc_bytes);
  const std::size_t word_bytes = round_up(kv_heads * pk.tiles * 3 * pk.tile_words * 4, 64);
  const std::size_t acc_total = round_up(kv_heads * pk.splits * acc_bytes, 64);
  PackedBlock block;
  if (!block.allocate(word_bytes + acc_total)) throw_scratch_allocation_failure("flashpp::backward");
  pk.words = block.at<std::uint32_t>(0);
  pk.acc = block.at<float>(word_bytes);

  const std::int64_t pack_tasks = kv_heads * pk.tiles;
  const std::int64_t tasks = kv_heads * pk.splits;
  const std::int64_t store_tasks = kv_heads * pk.tiles;
  std::atomic<bool> out_of_memory{false};
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (std::int64_t x = 0; x < pack_tasks; ++x) pack_key_tile(a, pk, x / pk.tiles, x % pk.tiles);

    {
      const auto scratch = make_thread_scratch<Bf16BackwardScratch>(out_of_memory, pk.Dp);
#pragma omp barrier
      if (!out_of_memory) bf16_engine_begin();
#pragma omp for schedule(dynamic, 1)
      for (std::int64_t task = 0; task < tasks; ++task) {
        if (out_of_memory) continue;
        const std::int64_t bhk = task / pk.splits, split = task % pk.splits;
        const std::int64_t b = bhk / p.Hkv, hk = bhk % p.Hkv;
        float* dkt = pk.dkt(bhk, split);
        float* dvt = pk.dvt(bhk, split);
        if (acc_bytes > 0) std::memset(dkt, 0, static_cast<std::size_t>(acc_bytes));  // dK^T, dV^T
        for (std::int64_t u = split; u < units; u += pk.splits) {
          const std::int64_t h = hk * hpk + u / q_tiles, tile = u % q_tiles;
          backward_query_unit(a, d_rows, pk, b, h, tile * kQueryRows, dkt, dvt, *scratch);
        }
      }
      if (!out_of_memory) bf16_engine_end();

      // dK = scale * sum over the splits of dK^T, transposed back to rows; dV likewise. The
      // splits are added in order: the result does not depend on the thread count's timing.
#pragma omp for schedule(static)
      for (std::int64_t x = 0; x < store_tasks; ++x) {
        if (out_of_memory) continue;
        const std::int64_t bhk = x / pk.tiles, t = x % pk.tiles;
        const std::int64_t b = bhk / p.Hkv, hk = bhk % p.Hkv;
        const std::int64_t j0 = t * kKeys, kv_rows = std::min(kKeys, p.Nk - j0);
        float* rows_k = scratch->s.get();   // [kKeys][Dp], reusing the score tile's space
        float* rows_v = scratch->dp.get();
        for (std::int64_t d = 0; d < pk.Dp; ++d) {
          for (std::int64_t c = 0; c < kKeys; ++c) {
            float sk = 0.0f, sv = 0.0f;
            for (std::int64_t sp = 0; sp < pk.splits; ++sp) {
              sk += pk.dkt(bhk, sp)[d * pk.Nk_pad + j0 + c];
              sv += pk.dvt(bhk, sp)[d * pk.Nk_pad + j0 + c];
            }
            rows_k[c * pk.Dp + d] = sk;
            rows_v[c * pk.Dp + d] = sv;
          }
        }
        for (std::int64_t c = 0; c < kv_rows; ++c) {
          convert_from_f32(rows_k + c * pk.Dp, p.D, a.dk.dtype,
                           element_ptr_mut(a.dk, detail::offset4(a.dk, b, j0 + c, hk, 0)), p.scale);
          convert_from_f32(rows_v + c * pk.Dp, p.D, a.dv.dtype,
                           element_ptr_mut(a.dv, detail::offset4(a.dv, b, j0 + c, hk, 0)));
        }
      }
    }
  }
  throw_if_out_of_memory(out_of_memory, "flashpp::backward");
}

}  // namespace flashpp::cpu::FLASHPP_CPU_KERNEL_NAMESPACE
