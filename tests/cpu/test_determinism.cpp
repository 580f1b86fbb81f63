// Properties of Backend::cpu beyond accuracy: deterministic backward is bit-identical run to
// run, a caller-provided workspace gives the same result as an internal one, and the memory
// layout does not change the values.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "common/attention_case.hpp"
#include "common/metrics.hpp"

namespace flashpp::test {
namespace {

bool bit_identical(const HostTensor& a, const HostTensor& b) {
  return a.raw_bytes() == b.raw_bytes() && std::memcmp(a.raw(), b.raw(), a.raw_bytes()) == 0;
}

AttentionCase gqa_case(DType dtype, Layout layout) {
  AttentionCase c;
  c.shape = {2, 150, 90, 8, 2, 64};
  c.dtype = dtype;
  c.layout = layout;
  c.options.causal = true;
  c.options.alignment = Alignment::bottom_right;
  c.options.softcap = 10.0f;
  c.options.deterministic = true;
  c.seed = 31;
  return c;
}

TEST(CpuBackend, DeterministicBackwardIsBitIdentical) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    const AttentionCase c = gqa_case(dtype, Layout::bnhd);
    SCOPED_TRACE(c.describe());
    const AttentionInputs in = make_inputs(c);
    const ForwardOutputs f = run_forward(in, c.options, Backend::cpu);
    const Gradients first = run_backward(in, f, c.options, Backend::cpu);
    for (int run = 0; run < 3; ++run) {
      const Gradients again = run_backward(in, f, c.options, Backend::cpu);
      EXPECT_TRUE(bit_identical(first.dq, again.dq)) << "run " << run;
      EXPECT_TRUE(bit_identical(first.dk, again.dk)) << "run " << run;
      EXPECT_TRUE(bit_identical(first.dv, again.dv)) << "run " << run;
    }
  }
}

TEST(CpuBackend, CallerWorkspaceGivesTheSameResult) {
  const AttentionCase c = gqa_case(DType::f16, Layout::bhnd);
  const AttentionInputs in = make_inputs(c);
  Options options = c.options;
  options.backend = Backend::cpu;
  const ForwardOutputs f = run_forward(in, options, Backend::cpu);
  const Gradients internal = run_backward(in, f, options, Backend::cpu);
  const std::size_t bytes =
      flashpp::backward_workspace_size(in.q.view(), in.k.view(), in.v.view(), options);
  std::vector<std::uint64_t> buffer((bytes + 7) / 8 + 1, ~0ull);  // garbage contents
  Gradients given{in.q.like(), in.k.like(), in.v.like()};
  flashpp::backward(in.q.view(), in.k.view(), in.v.view(), f.o.view(), f.lse.view(),
                    in.dout.view(), given.dq.view(), given.dk.view(), given.dv.view(), options,
                    nullptr, Workspace{buffer.data(), bytes});
  EXPECT_TRUE(bit_identical(internal.dq, given.dq));
  EXPECT_TRUE(bit_identical(internal.dk, given.dk));
  EXPECT_TRUE(bit_identical(internal.dv, given.dv));
}

// The same values stored bnhd, bhnd and padded give the same outputs (up to float32
// reassociation, should a kernel pick a different path for contiguous rows).
TEST(CpuBackend, LayoutDoesNotChangeValues) {
  const AttentionCase base = gqa_case(DType::f32, Layout::bnhd);
  const AttentionInputs in = make_inputs(base);
  const ForwardOutputs f = run_forward(in, base.options, Backend::cpu);
  const Gradients g = run_backward(in, f, base.options, Backend::cpu);
  for (Layout layout : {Layout::bhnd, Layout::padded}) {
    SCOPED_TRACE(to_string(layout));
    AttentionInputs other;
    for (auto [from, to] : {std::pair{&in.q, &other.q}, std::pair{&in.k, &other.k},
                            std::pair{&in.v, &other.v}, std::pair{&in.dout, &other.dout}}) {
      *to = HostTensor::attention(DType::f32, from->size(0), from->size(1), from->size(2),
                                  from->size(3), layout);
      to->set_values(from->values());
    }
    const ForwardOutputs f2 = run_forward(other, base.options, Backend::cpu);
    const Gradients g2 = run_backward(other, f2, base.options, Backend::cpu);
    EXPECT_LE(relative_error(f2.o, f.o), 1e-6);
    EXPECT_LE(max_scaled_error(f2.lse, f.lse), 1e-6);
    EXPECT_LE(relative_error(g2.dq, g.dq), 1e-6);
    EXPECT_LE(relative_error(g2.dk, g.dk), 1e-6);
    EXPECT_LE(relative_error(g2.dv, g.dv), 1e-6);
  }
}

// Backend::automatic on CPU tensors is Backend::cpu; write_lse = false leaves lse alone and
// does not change o.
TEST(CpuBackend, AutomaticBackendAndWriteLseOff) {
  const AttentionCase c = gqa_case(DType::f16, Layout::bnhd);
  const AttentionInputs in = make_inputs(c);
  const ForwardOutputs cpu = run_forward(in, c.options, Backend::cpu);
  const ForwardOutputs automatic = run_forward(in, c.options, Backend::automatic);
  EXPECT_TRUE(bit_identical(cpu.o, automatic.o));
  EXPECT_TRUE(bit_identical(cpu.lse, automatic.lse));

  Options no_lse = c.options;
  no_lse.write_lse = false;
  no_lse.backend = Backend::cpu;
  HostTensor o = in.q.like(), lse = cpu.lse.like();
  flashpp::forward(in.q.view(), in.k.view(), in.v.view(), o.view(), lse.view(), no_lse);
  EXPECT_TRUE(bit_identical(o, cpu.o));
  EXPECT_EQ(count_nan(lse), lse.numel()) << "lse was written although write_lse is false";
}

}  // namespace
}  // namespace flashpp::test
