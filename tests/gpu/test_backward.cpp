// The CUDA backward against the float64 oracle (Backend::cpu_reference): dQ, dK, dV over a
// sweep of shapes, head dims, GQA ratios, masks, softcap, dropout, dtypes and layouts.
//
// Criterion (docs/design.md, "Testing"): the kernel's error against the oracle is at most about 2x the
// error of the same computation done naively in the storage dtype (every intermediate S, P, dP,
// dS rounded to it, as a framework would do in fp16/bf16), plus the noise floor of dQ/dK that
// comes from D = rowsum(dO * O) being formed from the rounded O (tests/common/tolerance.hpp).
// Outputs are poisoned (NaN, gaps included) before every run, so an unwritten element fails.
// The forward outputs o and lse fed to the backward are the oracle's, rounded to the dtype: the
// backward is tested on its own, independent of the CUDA forward.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <optional>
#include <tuple>
#include <vector>

#include "common/attention_case.hpp"
#include "common/half_convert.hpp"
#include "common/host_tensor.hpp"
#include "common/mask.hpp"
#include "common/metrics.hpp"
#include "common/philox.hpp"
#include "common/tolerance.hpp"
#include "flashpp/flashpp.hpp"
#include "gpu_buffer.hpp"
#include "gpu_runner.hpp"
#include "scoped_env.hpp"

namespace flashpp::test {
namespace {

using gpu_test::DeviceBuffer;
constexpr Device kGpu{DeviceType::cuda, 0};

// A device copy of a HostTensor's whole storage (gaps included), viewed with the same strides.
struct DeviceTensor {
  DeviceBuffer buffer;
  TensorView view;

  explicit DeviceTensor(const HostTensor& host) : buffer(host.raw_bytes()) {
    if (host.raw_bytes() > 0) {
      cudaMemcpy(buffer.data(), host.raw(), host.raw_bytes(), cudaMemcpyHostToDevice);
    }
    view = host.view(kGpu);
    view.data = host.raw_bytes() > 0 ? buffer.data() : nullptr;
  }
  void download_into(HostTensor& host) const {
    if (host.raw_bytes() > 0) {
      cudaMemcpy(host.raw(), buffer.data(), host.raw_bytes(), cudaMemcpyDeviceToHost);
    }
  }
};

// The backward on the GPU with poisoned outputs; returns the gradients as host tensors.
Gradients cuda_backward(const AttentionInputs& in, const ForwardOutputs& fwd, Options options) {
  options.backend = Backend::cuda;
  Gradients g{in.q.like(), in.k.like(), in.v.like()};  // like() is poisoned (NaN everywhere)
  const DeviceTensor q(in.q), k(in.k), v(in.v), dout(in.dout), o(fwd.o), lse(fwd.lse);
  DeviceTensor dq(g.dq), dk(g.dk), dv(g.dv);
  backward(q.view, k.view, v.view, o.view, lse.view, dout.view, dq.view, dk.view, dv.view,
           options);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  dq.download_into(g.dq);
  dk.download_into(g.dk);
  dv.download_into(g.dv);
  return g;
}

// ---- The naive same-dtype computation ------------------------------------------------------

float round_to(DType dtype, float x) {
  switch (dtype) {
    case DType::f16: return detail::half_to_float(detail::float_to_half(x));
    case DType::bf16: return detail::bf16_to_float(detail::float_to_bf16(x));
    default: return x;
  }
}

detail::Mask mask_of(const AttentionCase& c) {
  const Options& o = c.options;
  detail::Mask m;
  m.shift = o.alignment == Alignment::bottom_right ? c.shape.Nk - c.shape.Nq : 0;
  m.left = o.window_left == kUnbounded ? detail::kNoLimit : o.window_left;
  m.right = o.window_right == kUnbounded ? detail::kNoLimit : o.window_right;
  if (o.causal) m.right = 0;
  return m;
}

// Attention's backward as a framework computes it in the storage dtype: float32 dot products,
// every materialised intermediate (S, P, P~, dP, dS) rounded to the dtype, softmax backward in
// float32 on rounded inputs. Its error against the oracle is the yardstick of the 2x rule.
Gradients naive_backward(const AttentionCase& c, const AttentionInputs& in) {
  const AttentionShape& s = c.shape;
  const DType dt = c.dtype;
  const detail::Mask mask = mask_of(c);
  const float scale = std::isnan(c.options.softmax_scale) || c.options.softmax_scale <= 0
                          ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.D)))
                          : c.options.softmax_scale;
  const float cap = c.options.softcap;
  const detail::DropoutParams drop =
      detail::make_dropout_params(c.options.dropout_p, c.options.seed, c.options.offset);
  const std::int64_t hpk = s.Hq / s.Hkv;
  Gradients g{in.q.like(), in.k.like(), in.v.like()};
  auto at = [](const HostTensor& t, std::int64_t b, std::int64_t n, std::int64_t h,
               std::int64_t d) { return static_cast<float>(t.get(b, n, h, d)); };
  for (std::int64_t b = 0; b < s.B; ++b) {
    for (std::int64_t hk = 0; hk < s.Hkv; ++hk) {
      std::vector<float> dk(s.Nk * s.D, 0.f), dv(s.Nk * s.D, 0.f);
      for (std::int64_t h = hk * hpk; h < (hk + 1) * hpk; ++h) {
        const auto bh = static_cast<std::uint32_t>(b * s.Hq + h);
        for (std::int64_t i = 0; i < s.Nq; ++i) {
          std::vector<float> S(s.Nk, -INFINITY), P(s.Nk, 0.f), Pd(s.Nk, 0.f), dP(s.Nk, 0.f),
              dS(s.Nk, 0.f), drop_scale(s.Nk, 1.f);
          float row_max = -INFINITY;
          for (std::int64_t j = 0; j < s.Nk; ++j) {
            if (!mask.visible(i, j)) continue;
            float dot = 0.f;
            for (std::int64_t d = 0; d < s.D; ++d) dot += at(in.q, b, i, h, d) * at(in.k, b, j, hk, d);
            float x = round_to(dt, dot * scale);
            if (cap > 0) x = round_to(dt, cap * std::tanh(x / cap));
            S[j] = x;
            row_max = std::max(row_max, x);
          }
          if (row_max == -INFINITY) {
            for (std::int64_t d = 0; d < s.D; ++d) g.dq.set(b, i, h, d, 0.0);
            continue;
          }
          float sum = 0.f;
          for (std::int64_t j = 0; j < s.Nk; ++j) sum += std::exp(S[j] - row_max);
          float D = 0.f;
          for (std::int64_t j = 0; j < s.Nk; ++j) {
            if (S[j] == -INFINITY) continue;
            P[j] = round_to(dt, std::exp(S[j] - row_max) / sum);
            if (drop.enabled()) {
              const bool keep = detail::dropout_keep(drop, bh, static_cast<std::uint32_t>(i),
                                                     static_cast<std::uint32_t>(j));
              drop_scale[j] = keep ? drop.keep_scale : 0.f;
            }
            Pd[j] = round_to(dt, P[j] * drop_scale[j]);
            float dot = 0.f;
            for (std::int64_t d = 0; d < s.D; ++d) dot += at(in.dout, b, i, h, d) * at(in.v, b, j, hk, d);
            dP[j] = round_to(dt, round_to(dt, dot) * drop_scale[j]);
            D += P[j] * dP[j];
          }
          for (std::int64_t j = 0; j < s.Nk; ++j) {
            if (S[j] == -INFINITY) continue;
            float ds = round_to(dt, P[j] * (dP[j] - D));
            if (cap > 0) ds = round_to(dt, ds * (1.f - (S[j] / cap) * (S[j] / cap)));
            dS[j] = ds;
          }
          for (std::int64_t d = 0; d < s.D; ++d) {
            float acc = 0.f;
            for (std::int64_t j = 0; j < s.Nk; ++j) acc += dS[j] * at(in.k, b, j, hk, d);
            g.dq.set(b, i, h, d, round_to(dt, acc * scale));
          }
          for (std::int64_t j = 0; j < s.Nk; ++j) {
            if (S[j] == -INFINITY) continue;
            for (std::int64_t d = 0; d < s.D; ++d) {
              dv[j * s.D + d] += Pd[j] * at(in.dout, b, i, h, d);
              dk[j * s.D + d] += dS[j] * scale * at(in.q, b, i, h, d);
            }
          }
        }
      }
      for (std::int64_t j = 0; j < s.Nk; ++j) {
        for (std::int64_t d = 0; d < s.D; ++d) {
          g.dk.set(b, j, hk, d, round_to(dt, dk[j * s.D + d]));
          g.dv.set(b, j, hk, d, round_to(dt, dv[j * s.D + d]));
        }
      }
    }
  }
  return g;
}

// ---- The check ------------------------------------------------------------------------------

// o and lse of the oracle, stored as a real forward would (o in the dtype, lse float32).
ForwardOutputs rounded_forward(const ForwardOutputs& oracle_fwd, DType dtype, Layout lse_layout) {
  ForwardOutputs f;
  f.o = oracle_fwd.o.converted(dtype);
  const HostTensor& l = oracle_fwd.lse;
  f.lse = HostTensor::lse(DType::f32, l.size(0), l.size(1), l.size(2), lse_layout);
  for (std::int64_t b = 0; b < l.size(0); ++b)
    for (std::int64_t h = 0; h < l.size(1); ++h)
      for (std::int64_t i = 0; i < l.size(2); ++i) f.lse.set(b, h, i, 0, l.get(b, h, i));
  return f;
}

void expect_close(const char* name, const HostTensor& ours, const HostTensor& naive,
                  const HostTensor& ref, double noise_floor, DType dtype,
                  const std::string& what) {
  EXPECT_EQ(count_nonfinite(ours), 0) << name << " has NaN/inf (unwritten?) " << what;
  EXPECT_TRUE(ours.gaps_untouched()) << name << " written outside its view " << what;
  const double naive_err = relative_error(naive, ref);
  const double rtol = std::max(2.0 * naive_err, unit_roundoff(dtype));
  double measured = 0;
  EXPECT_TRUE(within(ours, ref, rtol, noise_floor, &measured))
      << name << ": error " << measured << " vs naive same-dtype " << naive_err << " (limit "
      << rtol << " + floor " << noise_floor << ") " << worst_element(ours, ref) << " -- " << what;
}

void check_case(const AttentionCase& c, Layout lse_layout = Layout::bnhd) {
  const AttentionInputs in = make_inputs(c);
  const OracleResult oracle = run_oracle(in, c.options, /*with_backward=*/true);
  const ForwardOutputs fwd = rounded_forward(oracle.fwd, c.dtype, lse_layout);
  const Gradients ours = cuda_backward(in, fwd, c.options);
  const Gradients naive = naive_backward(c, in);
  const NoiseFloor floor = gradient_noise_floor(c);
  const std::string what = c.describe();
  expect_close("dq", ours.dq, naive.dq, oracle.grads.dq, floor.dq, c.dtype, what);
  expect_close("dk", ours.dk, naive.dk, oracle.grads.dk, floor.dk, c.dtype, what);
  expect_close("dv", ours.dv, naive.dv, oracle.grads.dv, 0.0, c.dtype, what);
}

AttentionCase make_case(AttentionShape shape, DType dtype, Layout layout, std::uint64_t seed) {
  AttentionCase c;
  c.shape = shape;
  c.dtype = dtype;
  c.layout = layout;
  c.seed = seed;
  return c;
}

// ---- The sweep --------------------------------------------------------------------------------

// Tiny shapes that still reach every code path (partial tiles, element masks, GQA, softcap,
// dropout, both dQ modes, the sm90 kernels for small grids and the ones they replace): what
// tools/gpu_check.sh runs under compute-sanitizer ("*Small*").
TEST(CudaBackward, SmallShapesEveryPath) {
  FLASHPP_SKIP_WITHOUT_GPU();
  std::uint64_t seed = 50;
  for (bool deterministic : {false, true}) {
    for (std::int64_t D : {64, 96, 136, 200}) {
      AttentionCase c = make_case({1, 70, 150, 2, 1, D}, DType::f16, Layout::bnhd, ++seed);
      c.options.deterministic = deterministic;
      c.options.causal = true;
      c.options.alignment = Alignment::bottom_right;
      c.options.dropout_p = 0.25f;
      c.options.softcap = 4.0f;
      check_case(c);
      c = make_case({1, 150, 70, 2, 2, D}, DType::bf16, Layout::bhnd, ++seed);
      c.options.deterministic = deterministic;
      c.options.window_left = 30;
      c.options.window_right = 5;
      check_case(c);
      if (D <= 96 && !deterministic) {  // the sm90 kernels this grid does not take by default:
        gpu_test::ScopedEnv whole("FLASHPP_SM90_BWD_SPLIT", "0");  // the unsplit key tiles
        gpu_test::ScopedEnv narrow("FLASHPP_SM90_BWD_NARROW", D == 64 ? "1" : "0");  // 128 keys
        check_case(c);
        if (D == 64) {
          gpu_test::ScopedEnv wide("FLASHPP_SM90_BWD_NARROW", "0");  // and 192 keys
          check_case(c);
        }
      }
      // Unmasked: few units, so the main kernel splits each over several blocks (tail_split.hpp)
      // unless deterministic.
      c = make_case({1, 200, 300, 2, 1, D}, DType::f16, Layout::bnhd, ++seed);
      c.options.deterministic = deterministic;
      c.options.dropout_p = 0.1f;
      check_case(c);
    }
  }
}

// A grid of one wave and a few units on a GPU of 100-136 SMs: the main kernel runs whole units
// and split units (tail_split.hpp) in one launch. Units: 136 key tiles of 128 keys (the last one
// partial); each walks 1 query tile x 2 query heads. (~15 s, most of it the float64 oracle.)
TEST(CudaBackward, SplitLastWave) {
  FLASHPP_SKIP_WITHOUT_GPU();
  check_case(make_case({1, 100, 136 * 128 - 5, 2, 1, 64}, DType::f16, Layout::bnhd, 1200));
}

// The sm90 family's split last wave (kernel.cuh kTailSplit): one wave of whole key tiles and a
// few more, split into pieces over their steps (query heads x query tiles), each adding its dK, dV
// into float32 sums that the postprocess writes out. GQA (the pieces cut across query heads), a
// head dim below the kernel's (56 -> 64) and Nk cut inside a key tile; D=96 with dropout, whose
// calls launch every key tile whole. The key tiles are 192 keys at D=64 and 128 at 96/128 (sm80:
// the same shapes split its 128/64-key tiles differently). Small unmasked shapes elsewhere in this
// file split too (fewer units than half a wave); these add the whole units beside the pieces.
// (About 30 s a case on the lent H100's host, most of it the float64 oracle over ~26k keys.)
TEST(CudaBackward, SplitLastWaveSm90) {
  FLASHPP_SKIP_WITHOUT_GPU();
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  std::uint64_t seed = 1300;
  for (std::int64_t D : {56, 96, 128}) {
    const std::int64_t key_tile = D <= 64 ? 192 : 128;
    // One block per SM: sms whole tiles and 3 in a split last wave.
    const AttentionShape shape{1, 100, key_tile * (sms + 3) - 37, 4, 1, D};
    // (A grid this small takes 128-key blocks at D=64 by default: Sm90KernelVariantsEveryMask.)
    gpu_test::ScopedEnv wide("FLASHPP_SM90_BWD_NARROW", "0");
    const bool dropout = D == 96;
    AttentionCase c = make_case(shape, dropout ? DType::f16 : DType::bf16, Layout::bnhd, ++seed);
    if (dropout) {
      c.options.dropout_p = 0.15f;
      c.options.seed = 5;
    }
    check_case(c);
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(CudaBackward, EveryHeadDimBothDtypesBothLayouts) {
  FLASHPP_SKIP_WITHOUT_GPU();
  std::uint64_t seed = 100;
  for (std::int64_t D : {32, 40, 64, 80, 96, 128, 160, 192, 256}) {
    for (DType dt : {DType::f16, DType::bf16}) {
      const Layout layout = (D / 8 + (dt == DType::bf16)) % 2 ? Layout::bhnd : Layout::bnhd;
      check_case(make_case({2, 127, 127, 2, 1, D}, dt, layout, ++seed));
    }
  }
}

TEST(CudaBackward, LengthsOneSeventeenAndUnequal) {
  FLASHPP_SKIP_WITHOUT_GPU();
  const AttentionShape shapes[] = {{1, 1, 1, 2, 2, 64},   {1, 1, 1000, 2, 1, 64},
                                   {1, 1000, 1, 2, 1, 64}, {2, 17, 127, 3, 3, 64},
                                   {1, 127, 17, 2, 2, 128}, {1, 1000, 1000, 2, 1, 64}};
  std::uint64_t seed = 200;
  for (const auto& s : shapes) {
    check_case(make_case(s, DType::f16, Layout::bnhd, ++seed));
    check_case(make_case(s, DType::bf16, Layout::bhnd, ++seed));
  }
}

// Issue 12: dQ was NaN for tiny key lengths. Keys past Nk arrive as zero rows, and a tile cut by
// Nk took no element test when no mask was active, so P = exp(0 - lse) overflowed where a row's
// real scores are all very negative and dQ += dS K turned inf * 0 into NaN. The report's first
// case, then Nk in {1, 2, 3} x many query rows x every head dim class, causal and not.
TEST(CudaBackward, Issue12TinyKeyLengthNaN) {
  FLASHPP_SKIP_WITHOUT_GPU();
  AttentionCase c = make_case({3, 1537, 1, 2, 2, 224}, DType::f16, Layout::bnhd, 1212);
  c.options.causal = true;
  c.options.softmax_scale = 0.3f;
  check_case(c);
}

TEST(CudaBackward, TinyKeyLengthsEveryHeadDim) {
  FLASHPP_SKIP_WITHOUT_GPU();
  std::uint64_t seed = 1300;
  for (std::int64_t D : {32, 40, 64, 80, 96, 128, 160, 192, 224, 256}) {
    for (std::int64_t Nk : {1, 2, 3}) {
      const DType dt = (D / 8 + Nk) % 2 ? DType::f16 : DType::bf16;
      AttentionCase c = make_case({1, 1537, Nk, 2, 1, D}, dt, Layout::bnhd, ++seed);
      c.options.causal = Nk != 2;
      c.options.softmax_scale = 0.3f;
      c.options.deterministic = Nk == 3;  // dQ by the dQ kernel instead of the main kernel
      check_case(c);
      if (::testing::Test::HasFailure()) return;  // the first failing case is the useful one
    }
  }
}

TEST(CudaBackward, GqaRatiosOneToEight) {
  FLASHPP_SKIP_WITHOUT_GPU();
  std::uint64_t seed = 300;
  for (std::int64_t hkv : {8, 4, 2, 1}) {
    AttentionCase c = make_case({1, 127, 200, 8, hkv, 64}, DType::bf16, Layout::bnhd, ++seed);
    c.options.causal = hkv % 2 == 0;
    check_case(c);
  }
}

TEST(CudaBackward, CausalBothAlignments) {
  FLASHPP_SKIP_WITHOUT_GPU();
  std::uint64_t seed = 400;
  const AttentionShape shapes[] = {{1, 127, 127, 2, 1, 64}, {1, 17, 300, 2, 2, 128},
                                   {1, 300, 17, 2, 2, 64},  {1, 1000, 1000, 2, 1, 128}};
  for (const auto& s : shapes) {
    for (Alignment a : {Alignment::top_left, Alignment::bottom_right}) {
      AttentionCase c = make_case(s, seed % 2 ? DType::f16 : DType::bf16, Layout::bhnd, ++seed);
      c.options.causal = true;
      c.options.alignment = a;
      check_case(c);
    }
  }
}

// Keys that no query sees (top-left causal with Nk > Nq; a window under bottom-right alignment
// hiding the first keys): the sm90 main kernel launches only the key tiles some query sees and
// zero_key_rows writes dK = dV = 0 on the others (outputs start as NaN: cuda_backward poisons).
// Trailing and leading unseen tiles, GQA, both layouts, the wide kernel's 64-key tiles, the
// deterministic mode and dropout.
TEST(CudaBackward, KeysNoQuerySeesAreZero) {
  FLASHPP_SKIP_WITHOUT_GPU();
  std::uint64_t seed = 470;
  for (std::int64_t D : {64, 128, 192}) {
    AttentionCase c = make_case({2, 100, 700, 4, 2, D}, DType::f16, Layout::bnhd, ++seed);
    c.options.causal = true;  // top-left: keys 100.. unseen
    check_case(c);
    c = make_case({1, 100, 700, 4, 2, D}, DType::bf16, Layout::bhnd, ++seed);
    c.options.causal = true;
    c.options.alignment = Alignment::bottom_right;
    c.options.window_left = 64;  // keys below 536 unseen
    check_case(c);
  }
  AttentionCase c = make_case({1, 100, 700, 4, 2, 128}, DType::bf16, Layout::bnhd, ++seed);
  c.options.causal = true;
  c.options.deterministic = true;
  check_case(c);
  c = make_case({1, 100, 700, 2, 1, 64}, DType::f16, Layout::bnhd, ++seed);
  c.options.causal = true;
  c.options.dropout_p = 0.2f;
  c.options.seed = 9;
  check_case(c);
}

TEST(CudaBackward, SlidingWindows) {
  FLASHPP_SKIP_WITHOUT_GPU();
  struct W {
    std::int64_t left, right;
    bool causal;
    Alignment align;
  };
  const W windows[] = {{32, 8, false, Alignment::top_left},
                       {100, -1, true, Alignment::bottom_right},
                       {-1, 0, false, Alignment::top_left},
                       {0, 0, false, Alignment::bottom_right}};
  std::uint64_t seed = 500;
  for (const W& w : windows) {
    AttentionCase c = make_case({1, 300, 500, 2, 1, 64}, DType::f16, Layout::bnhd, ++seed);
    c.options.window_left = w.left;
    c.options.window_right = w.right;
    c.options.causal = w.causal;
    c.options.alignment = w.align;
    check_case(c);
  }
}

TEST(CudaBackward, Softcap) {
  FLASHPP_SKIP_WITHOUT_GPU();
  AttentionCase c = make_case({1, 200, 200, 2, 1, 64}, DType::bf16, Layout::bnhd, 600);
  c.options.softcap = 2.0f;
  check_case(c);
  c = make_case({1, 130, 70, 2, 2, 128}, DType::f16, Layout::bhnd, 601);
  c.options.softcap = 5.0f;
  c.options.causal = true;
  check_case(c);
}

TEST(CudaBackward, DropoutMatchesTheReferenceMask) {
  FLASHPP_SKIP_WITHOUT_GPU();
  AttentionCase c = make_case({2, 200, 200, 2, 1, 64}, DType::f16, Layout::bnhd, 700);
  c.options.dropout_p = 0.2f;
  c.options.seed = 1234;
  c.options.offset = 77;
  check_case(c);
  c = make_case({1, 127, 300, 4, 2, 128}, DType::bf16, Layout::bhnd, 701);
  c.options.dropout_p = 0.5f;
  c.options.seed = 99;
  c.options.causal = true;
  c.options.softcap = 3.0f;
  check_case(c);
}

// The sm90 family's wide kernel (kernel head dims 192 and 256: sm90/backward/wide_kernel.cuh;
// the sm80 family elsewhere): 64-key blocks cut by Nk, query steps cut by Nq, both causal
// alignments, windows, GQA, dropout, both layouts, head dims that round up to 192 and 256.
TEST(CudaBackward, WideHeadDimsEveryFeature) {
  FLASHPP_SKIP_WITHOUT_GPU();
  std::uint64_t seed = 750;
  for (std::int64_t D : {176, 192, 200, 256}) {
    const DType dt = D % 16 == 0 ? DType::bf16 : DType::f16;
    AttentionCase c = make_case({2, 130, 257, 4, 2, D}, dt, Layout::bnhd, ++seed);
    check_case(c);
    c = make_case({1, 300, 190, 2, 2, D}, dt, Layout::bhnd, ++seed);
    c.options.causal = true;
    c.options.alignment = D % 64 == 0 ? Alignment::bottom_right : Alignment::top_left;
    check_case(c);
    c = make_case({1, 333, 400, 4, 1, D}, dt, Layout::bnhd, ++seed);
    c.options.window_left = 70;
    c.options.window_right = 3;
    check_case(c);
    c = make_case({2, 129, 129, 2, 1, D}, dt, Layout::bhnd, ++seed);
    c.options.dropout_p = 0.3f;
    c.options.seed = 4321;
    c.options.offset = 5;
    c.options.causal = D == 256;
    check_case(c);
    if (::testing::Test::HasFailure()) return;  // the first failing case is the useful one
  }
}

// Unmasked calls at kernel head dim 128 over odd and even counts of 128-key tiles, GQA and both
// layouts (the block's dQ; session 18's paired key tiles, since removed, ran a pad tile past Nk
// for odd counts).
TEST(CudaBackward, UnmaskedKeyTileCountsOddAndEven) {
  FLASHPP_SKIP_WITHOUT_GPU();
  std::uint64_t seed = 780;
  const AttentionShape shapes[] = {{2, 300, 333, 4, 2, 128}, {1, 200, 512, 2, 1, 128},
                                   {1, 65, 129, 2, 2, 120}, {2, 64, 1000, 2, 2, 128}};
  for (const auto& s : shapes) {
    check_case(make_case(s, seed % 2 ? DType::f16 : DType::bf16, seed % 2 ? Layout::bnhd : Layout::bhnd, ++seed));
    if (::testing::Test::HasFailure()) return;
  }
}

// A call shape with its mask, for the tests that run a kernel variant over many masks.
struct MaskedShape {
  AttentionShape shape;
  bool causal;
  Alignment align;
  std::int64_t left, right;  // the window (-1: none)
};

// check_case of one MaskedShape, the dtype and layout alternating with the seed (advanced here);
// false once the test has a failure (the first failing case is the useful one).
bool check_masked_shape(const MaskedShape& m, std::uint64_t& seed) {
  const std::uint64_t case_seed = ++seed;
  AttentionCase c = make_case(m.shape, case_seed % 2 ? DType::f16 : DType::bf16,
                              case_seed % 2 ? Layout::bnhd : Layout::bhnd, case_seed);
  c.options.causal = m.causal;
  c.options.alignment = m.align;
  c.options.window_left = m.left;
  c.options.window_right = m.right;
  check_case(c);
  return !::testing::Test::HasFailure();
}

// A choice of the sm90 backward's kernel for a pass over a test's shapes (nullptr: the default).
struct KernelPass {
  const char* split;   // FLASHPP_SM90_BWD_SPLIT
  const char* narrow;  // FLASHPP_SM90_BWD_NARROW
};

// check_masked_shape of every case under every pass, seeds from `seed` on; a pass that forces
// the 128-key blocks (narrow set, split not) takes the D=64 cases only. Stops at the first failure.
void check_masked_shapes_per_pass(const std::vector<MaskedShape>& cases,
                                  std::initializer_list<KernelPass> passes, std::uint64_t seed) {
  for (const KernelPass& pass : passes) {
    std::optional<gpu_test::ScopedEnv> split, narrow;
    if (pass.split != nullptr) split.emplace("FLASHPP_SM90_BWD_SPLIT", pass.split);
    if (pass.narrow != nullptr) narrow.emplace("FLASHPP_SM90_BWD_NARROW", pass.narrow);
    for (const MaskedShape& m : cases) {
      if (pass.narrow != nullptr && pass.split == nullptr && m.shape.D > 64) continue;
      if (!check_masked_shape(m, seed)) return;
    }
  }
}

// Paired key tiles (the sm90 backward at D=128, clusters of two blocks adding their dQ^T together),
// forced on for every call (by default only long calls without a mask take them): odd and even
// key-tile counts (an odd one gives the last pair a pad block past Nk), a pair whose upper tile
// only some steps see (causal, both alignments, a window), keys no query sees, GQA, Nq != Nk.
TEST(CudaBackward, PairedKeyTilesEveryMask) {
  FLASHPP_SKIP_WITHOUT_GPU();
  gpu_test::ScopedEnv pairs("FLASHPP_SM90_BWD_PAIRS", "1");
  const MaskedShape cases[] = {{{2, 300, 333, 4, 2, 128}, false, Alignment::top_left, -1, -1},
                               {{1, 200, 512, 2, 1, 128}, true, Alignment::bottom_right, -1, -1},
                               {{1, 512, 200, 2, 2, 120}, true, Alignment::top_left, -1, -1},
                               {{2, 700, 900, 4, 1, 128}, false, Alignment::bottom_right, 150, 20},
                               {{1, 1000, 1000, 2, 2, 128}, true, Alignment::top_left, -1, -1},
                               {{1, 64, 1000, 2, 2, 128}, true, Alignment::top_left, -1, -1}};
  std::uint64_t seed = 820;
  for (const MaskedShape& m : cases) {
    if (!check_masked_shape(m, seed)) return;
  }
}

// The pairs' small last wave split (unmasked calls, an even count of key tiles a head): 68 pairs
// of key tiles on a GPU of 60-66 clusters of two (132-SM parts: 66) leave a last wave of 2-8 pairs,
// cut into pieces over their steps (the pieces' dK, dV summed by the postprocess); grids of at
// most half a wave of pairs split whole; Nk cut inside the last tile, GQA, head dims that round
// up. The pairs are forced on (by default they start at 64 steps a block).
TEST(CudaBackward, PairedKeyTilesSplitLastWave) {
  FLASHPP_SKIP_WITHOUT_GPU();
  gpu_test::ScopedEnv pairs("FLASHPP_SM90_BWD_PAIRS", "1");
  const std::int64_t keys = 256 * 68 - 37;
  const MaskedShape cases[] = {{{1, 100, keys, 2, 1, 128}, false, Alignment::top_left, -1, -1},
                               {{2, 300, 700, 4, 2, 120}, false, Alignment::top_left, -1, -1},
                               {{1, 333, 1000, 8, 2, 128}, false, Alignment::top_left, -1, -1}};
  std::uint64_t seed = 840;
  for (const MaskedShape& m : cases) {
    if (!check_masked_shape(m, seed)) return;
  }
}

// The sm90 backward's kernels for one call, each in turn: the default choice (these grids are
// small: up to half a wave of key tiles they run split whole, the pieces' dK, dV summed by the
// postprocess; masked ones up to a wave too, in two pieces a tile, but at D=64, where such grids
// take 128-key blocks), every key tile whole (FLASHPP_SM90_BWD_SPLIT=0,
// FLASHPP_SM90_BWD_NARROW=0: 192-key blocks at D=64) and, at D=64, the 128-key blocks
// (FLASHPP_SM90_BWD_NARROW=1, kNarrow). Key tiles cut by Nk (a consumer with no key, one with
// some), causal both alignments, windows, keys no query sees after and before the seen ones (the
// launch starts at the first seen tile), GQA, Nq != Nk, head dims that round up.
TEST(CudaBackward, Sm90KernelVariantsEveryMask) {
  FLASHPP_SKIP_WITHOUT_GPU();
  const std::vector<MaskedShape> cases = {{{2, 300, 333, 4, 2, 64}, false, Alignment::top_left, -1, -1},
                               {{1, 200, 300, 2, 1, 64}, true, Alignment::bottom_right, -1, -1},
                               {{1, 512, 200, 2, 2, 56}, true, Alignment::top_left, -1, -1},
                               {{2, 700, 900, 4, 1, 64}, false, Alignment::bottom_right, 150, 20},
                               {{1, 1000, 1000, 2, 2, 40}, true, Alignment::top_left, -1, -1},
                               {{1, 64, 1000, 2, 2, 64}, true, Alignment::top_left, -1, -1},
                               {{1, 100, 700, 4, 2, 64}, true, Alignment::bottom_right, 64, -1},
                               {{1, 100, 700, 4, 2, 96}, true, Alignment::bottom_right, 64, -1},
                               {{2, 333, 300, 8, 2, 128}, true, Alignment::top_left, -1, -1},
                               {{1, 400, 500, 4, 1, 120}, false, Alignment::top_left, 100, 30},
                               // 80-96 key tiles: under a mask on a GPU of 100-160 SMs, two
                               // pieces each
                               {{1, 256, 256, 40, 40, 128}, true, Alignment::top_left, -1, -1},
                               {{1, 300, 300, 32, 32, 96}, true, Alignment::bottom_right, 100, -1},
                               {{1, 380, 380, 40, 40, 64}, true, Alignment::bottom_right, -1, -1},
                               // unmasked, 80 and 48 key tiles of few steps: whole tiles
                               // (pieces too short to pay) and one wave of halves
                               {{1, 200, 256, 40, 40, 128}, false, Alignment::top_left, -1, -1},
                               {{1, 300, 384, 24, 24, 64}, false, Alignment::top_left, -1, -1}};
  // (The last two at D=64 only: the 128-key blocks, and the 192-key ones split as they would
  // be without the 128-key kernel.)
  check_masked_shapes_per_pass(cases, {{nullptr, nullptr}, {"0", "0"}, {nullptr, "1"}, {nullptr, "0"}},
                               860);
}

// Steps that see none of a consumer's 64 keys (the sm90 kernels at D=64 skip the leading ones:
// kSkipHidden; D=128 computes them): under a causal mask the upper consumers' first steps of a
// block (both alignments, Nq != Nk), under a window with a short left side the lower consumers'
// last ones, under one with a long right side the upper consumers' first ones, a consumer whose
// keys all lie past Nk on every step; GQA 4:1, so that they recur at each query head of the walk.
// Each on the default kernel, on whole 192-key blocks (no split) and on the 128-key blocks at D=64.
TEST(CudaBackward, HiddenConsumerSteps) {
  FLASHPP_SKIP_WITHOUT_GPU();
  std::vector<MaskedShape> cases;
  for (std::int64_t D : {64, 128}) {
    cases.push_back({{1, 520, 520, 4, 1, D}, true, Alignment::top_left, -1, -1});
    cases.push_back({{2, 300, 650, 4, 1, D}, true, Alignment::bottom_right, -1, -1});
    cases.push_back({{1, 600, 330, 4, 1, D}, true, Alignment::bottom_right, -1, -1});
    cases.push_back({{1, 600, 600, 4, 1, D}, false, Alignment::top_left, 20, 0});
    cases.push_back({{1, 450, 470, 4, 1, D}, false, Alignment::top_left, 0, 150});
    cases.push_back({{1, 400, 260, 4, 2, D}, true, Alignment::top_left, -1, -1});  // 260 = 192 + 68
  }
  check_masked_shapes_per_pass(cases, {{nullptr, nullptr}, {"0", "0"}, {nullptr, "1"}}, 880);
}

TEST(CudaBackward, StridedLse) {
  FLASHPP_SKIP_WITHOUT_GPU();
  check_case(make_case({2, 100, 100, 2, 1, 64}, DType::f16, Layout::bnhd, 800), Layout::padded);
}

// The deterministic tests' two passes: FLASHPP_SM90_BACKWARD as the binary was started (on
// Hopper by default the sm90 family's deterministic mode, whose tiles differ from the other sm90
// variants at D=64), then =0 (the sm80 family's).
constexpr const char* kDeterministicPasses[] = {"", "0"};

TEST(CudaBackward, DeterministicModeIsAccurateAndBitIdentical) {
  FLASHPP_SKIP_WITHOUT_GPU();
  std::uint64_t seed = 900;
  for (const char* sm90 : kDeterministicPasses)
  for (std::int64_t D : {64, 96, 128, 256}) {
    std::optional<gpu_test::ScopedEnv> guard;
    if (sm90[0] != '\0') guard.emplace("FLASHPP_SM90_BACKWARD", sm90);
    AttentionCase c = make_case({2, 300, 300, 4, 2, D}, DType::bf16, Layout::bnhd, ++seed);
    c.options.deterministic = true;
    c.options.causal = D == 128;
    if (D == 96) {  // with dropout (its mask regenerated in the backward)
      c.options.dropout_p = 0.1f;
      c.options.seed = 77;
    }
    check_case(c);
    const AttentionInputs in = make_inputs(c);
    const OracleResult oracle = run_oracle(in, c.options, /*with_backward=*/false);
    const ForwardOutputs fwd = rounded_forward(oracle.fwd, c.dtype, Layout::bnhd);
    const Gradients first = cuda_backward(in, fwd, c.options);
    for (int run = 0; run < 3; ++run) {
      const Gradients again = cuda_backward(in, fwd, c.options);
      for (auto [a, b] : {std::pair{&first.dq, &again.dq}, std::pair{&first.dk, &again.dk},
                          std::pair{&first.dv, &again.dv}}) {
        EXPECT_EQ(std::memcmp(a->raw(), b->raw(), a->raw_bytes()), 0)
            << "run " << run << " differs: " << c.describe();
      }
    }
  }
}

// Many key tiles adding into each query tile, more blocks than the GPU holds at once, GQA, and
// every mask shape: the deterministic mode must give the same bits run after run (on Hopper the
// sm90 backward orders its dQ additions with turn counters, a wrong turn would show as a
// difference or a hang; the second pass, FLASHPP_SM90_BACKWARD=0, runs the sm80 family's), and
// agree with the non-deterministic mode to rounding.
TEST(CudaBackward, DeterministicModeUnderContention) {
  FLASHPP_SKIP_WITHOUT_GPU();
  std::uint64_t seed = 960;
  for (const char* sm90 : kDeterministicPasses)
  for (std::int64_t D : {64, 96, 128}) {
    std::optional<gpu_test::ScopedEnv> guard;
    if (sm90[0] != '\0') guard.emplace("FLASHPP_SM90_BACKWARD", sm90);
    for (int shape = 0; shape < 4; ++shape) {
      AttentionCase c = make_case({2, shape == 3 ? 1500 : 2048, 2048, 8, 2, D},
                                  D == 64 ? DType::f16 : DType::bf16, Layout::bnhd, ++seed);
      c.options.causal = shape == 1 || shape == 3;
      c.options.alignment = shape == 3 ? Alignment::bottom_right : Alignment::top_left;
      if (shape == 2) {
        c.options.window_left = 300;
        c.options.window_right = 200;
        c.options.dropout_p = 0.15f;
        c.options.seed = 11;
      }
      const AttentionInputs in = make_inputs(c);
      const ForwardOutputs fwd = gpu_test::run_forward_cuda(in, c.options);  // no float64 oracle
      const Gradients loose = cuda_backward(in, fwd, c.options);
      c.options.deterministic = true;
      const Gradients first = cuda_backward(in, fwd, c.options);
      for (auto [name, a, b] : {std::tuple{"dq", &first.dq, &loose.dq},
                                std::tuple{"dk", &first.dk, &loose.dk},
                                std::tuple{"dv", &first.dv, &loose.dv}}) {
        EXPECT_EQ(count_nonfinite(*a), 0) << name << " " << c.describe();
        EXPECT_LE(relative_error(*a, *b), 4 * unit_roundoff(c.dtype)) << name << " " << c.describe();
      }
      for (int run = 0; run < 3; ++run) {
        const Gradients again = cuda_backward(in, fwd, c.options);
        for (auto [a, b] : {std::pair{&first.dq, &again.dq}, std::pair{&first.dk, &again.dk},
                            std::pair{&first.dv, &again.dv}}) {
          EXPECT_EQ(std::memcmp(a->raw(), b->raw(), a->raw_bytes()), 0)
              << "run " << run << " differs: " << c.describe();
        }
      }
      if (::testing::Test::HasFailure()) return;
    }
  }
}

TEST(CudaBackward, DeterministicModeWithMasksDropoutAndGqa) {
  FLASHPP_SKIP_WITHOUT_GPU();
  AttentionCase c = make_case({1, 17, 300, 4, 1, 96}, DType::f16, Layout::bhnd, 950);
  c.options.deterministic = true;
  c.options.causal = true;
  c.options.alignment = Alignment::bottom_right;
  c.options.dropout_p = 0.1f;
  c.options.seed = 5;
  check_case(c);
  c = make_case({1, 300, 200, 2, 1, 40}, DType::bf16, Layout::bnhd, 951);
  c.options.deterministic = true;
  c.options.window_left = 20;
  c.options.window_right = 10;
  check_case(c);
}

TEST(CudaBackward, EmptySequences) {
  FLASHPP_SKIP_WITHOUT_GPU();
  for (bool deterministic : {false, true}) {
    // Nk = 0: no key, dq = 0.
    AttentionCase c = make_case({2, 17, 0, 2, 1, 64}, DType::f16, Layout::bnhd, 1000);
    c.options.deterministic = deterministic;
    {
      const AttentionInputs in = make_inputs(c);
      ForwardOutputs fwd{in.q.like(), HostTensor::lse(DType::f32, 2, 2, 17)};
      fwd.o.fill(0.0);
      fwd.lse.fill(-std::numeric_limits<double>::infinity());
      const Gradients g = cuda_backward(in, fwd, c.options);
      for (double x : g.dq.values()) ASSERT_EQ(x, 0.0);
    }
    // Nq = 0: no query, dk = dv = 0.
    c = make_case({2, 0, 33, 2, 1, 64}, DType::bf16, Layout::bhnd, 1001);
    c.options.deterministic = deterministic;
    {
      const AttentionInputs in = make_inputs(c);
      const ForwardOutputs fwd{in.q.like(), HostTensor::lse(DType::f32, 2, 2, 0)};
      const Gradients g = cuda_backward(in, fwd, c.options);
      for (double x : g.dk.values()) ASSERT_EQ(x, 0.0);
      for (double x : g.dv.values()) ASSERT_EQ(x, 0.0);
    }
  }
}

TEST(CudaBackward, MisalignedTensorsAreRejectedNotMiscomputed) {
  FLASHPP_SKIP_WITHOUT_GPU();
  // Two heads, so the padded layout's odd head stride (D + 3) is really used.
  const AttentionCase c = make_case({1, 9, 9, 2, 2, 64}, DType::f16, Layout::padded, 1100);
  const AttentionInputs in = make_inputs(c);
  const OracleResult oracle = run_oracle(in, c.options, false);
  const ForwardOutputs fwd = rounded_forward(oracle.fwd, c.dtype, Layout::bnhd);
  try {
    cuda_backward(in, fwd, c.options);
    FAIL() << "expected flashpp::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported) << e.what();
  }
}

}  // namespace
}  // namespace flashpp::test
