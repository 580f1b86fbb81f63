// The checks must reject wrong kernels, not only accept right ones. Each case here produces the
// result of a typical kernel bug (by running Backend::cpu with a subtly wrong configuration, or
// by corrupting its output the way the bug would) and requires check_forward/check_backward to
// fail it, in every dtype; the unmodified run is the control and must pass. This also bounds
// the tolerances from above: they are loose enough for float32 kernels (the sweep) and tight
// enough to see a one-key mask error or a 1% scale error.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <tuple>

#include "common/attention_case.hpp"
#include "common/oracle_check.hpp"

namespace flashpp::test {
namespace {

AttentionCase base_case(DType dtype) {
  AttentionCase c;
  c.shape = {1, 100, 127, 4, 2, 64};
  c.dtype = dtype;
  c.layout = Layout::bhnd;
  c.options.causal = true;
  c.options.alignment = Alignment::bottom_right;
  c.seed = 4242;
  return c;
}

struct Bug {
  std::string name;
  // Adjusts the base case (the truth) where the bug needs a feature switched on.
  std::function<void(AttentionCase&)> truth;
  // Runs the "buggy kernel": returns forward outputs and gradients.
  std::function<std::pair<ForwardOutputs, Gradients>(const AttentionInputs&, const Options&)> run;
  bool forward_only = false;  // the bug shows in the forward (the backward may not be comparable)
};

std::pair<ForwardOutputs, Gradients> run_with(const AttentionInputs& in, const Options& fwd_opt,
                                              const Options& bwd_opt) {
  ForwardOutputs f = run_forward(in, fwd_opt, Backend::cpu);
  Gradients g = run_backward(in, f, bwd_opt, Backend::cpu);
  return {std::move(f), std::move(g)};
}

std::vector<Bug> bugs() {
  std::vector<Bug> b;
  b.push_back({"control_no_bug", [](AttentionCase&) {},
               [](const AttentionInputs& in, const Options& o) { return run_with(in, o, o); }});
  b.push_back({"mask_sees_one_key_too_many", [](AttentionCase&) {},
               [](const AttentionInputs& in, const Options& o) {
                 Options wrong = o;
                 wrong.causal = false;
                 wrong.window_right = 1;
                 return run_with(in, wrong, wrong);
               }});
  b.push_back({"causal_alignment_top_left", [](AttentionCase&) {},
               [](const AttentionInputs& in, const Options& o) {
                 Options wrong = o;
                 wrong.alignment = Alignment::top_left;
                 return run_with(in, wrong, wrong);
               }});
  b.push_back({"scale_one_percent_off", [](AttentionCase&) {},
               [](const AttentionInputs& in, const Options& o) {
                 Options wrong = o;
                 wrong.softmax_scale = 1.01f / 8.0f;  // D = 64
                 return run_with(in, wrong, wrong);
               }});
  b.push_back({"softcap_ignored", [](AttentionCase& t) { t.options.softcap = 5.0f; },
               [](const AttentionInputs& in, const Options& o) {
                 Options wrong = o;
                 wrong.softcap = 0.0f;
                 return run_with(in, wrong, wrong);
               }});
  b.push_back({"backward_ignores_softcap", [](AttentionCase& t) { t.options.softcap = 5.0f; },
               [](const AttentionInputs& in, const Options& o) {
                 Options wrong = o;
                 wrong.softcap = 0.0f;
                 return run_with(in, o, wrong);
               }});
  b.push_back({"dropout_mask_of_another_seed", [](AttentionCase& t) {
                 t.options.dropout_p = 0.1f;
                 t.options.seed = 1;
               },
               [](const AttentionInputs& in, const Options& o) {
                 Options wrong = o;
                 wrong.seed = 2;
                 return run_with(in, wrong, wrong);
               }});
  b.push_back({"backward_ignores_dropout", [](AttentionCase& t) {
                 t.options.dropout_p = 0.1f;
                 t.options.seed = 1;
               },
               [](const AttentionInputs& in, const Options& o) {
                 Options wrong = o;
                 wrong.dropout_p = 0.0f;
                 return run_with(in, o, wrong);
               }});
  b.push_back({"query_head_reads_wrong_kv_head", [](AttentionCase&) {},
               [](const AttentionInputs& in, const Options& o) {
                 // Swapping the two kv heads is what h % Hkv instead of h / (Hq/Hkv) does to
                 // query heads 1 and 2.
                 AttentionInputs swapped = in;
                 for (HostTensor* t : {&swapped.k, &swapped.v}) {
                   const HostTensor& src = t == &swapped.k ? in.k : in.v;
                   for (std::int64_t n = 0; n < t->size(1); ++n)
                     for (std::int64_t d = 0; d < t->size(3); ++d) {
                       t->set(0, n, 0, d, src.get(0, n, 1, d));
                       t->set(0, n, 1, d, src.get(0, n, 0, d));
                     }
                 }
                 return run_with(swapped, o, o);
               },
               /*forward_only=*/true});
  b.push_back({"last_key_skipped",
               [](AttentionCase& t) {  // no mask, Nq = Nk: every row sees the last key
                 t.options.causal = false;
                 t.shape.Nq = t.shape.Nk;
               },
               [](const AttentionInputs& in, const Options& o) {
                 // A kernel that drops the last partial key tile's final key.
                 AttentionInputs shorter = in;
                 for (HostTensor* t : {&shorter.k, &shorter.v}) {
                   HostTensor cut = HostTensor::attention(t->dtype(), t->size(0), t->size(1) - 1,
                                                          t->size(2), t->size(3), t->layout());
                   for (std::int64_t n = 0; n + 1 < t->size(1); ++n)
                     for (std::int64_t h = 0; h < t->size(2); ++h)
                       for (std::int64_t d = 0; d < t->size(3); ++d)
                         cut.set(0, n, h, d, t->get(0, n, h, d));
                   *t = cut;
                 }
                 ForwardOutputs f = run_forward(shorter, o, Backend::cpu);
                 return std::pair<ForwardOutputs, Gradients>{std::move(f), Gradients{}};
               },
               /*forward_only=*/true});
  b.push_back({"lse_in_base_2", [](AttentionCase&) {},
               [](const AttentionInputs& in, const Options& o) {
                 auto result = run_with(in, o, o);
                 HostTensor& lse = result.first.lse;
                 for (std::int64_t h = 0; h < lse.size(1); ++h)
                   for (std::int64_t n = 0; n < lse.size(2); ++n)
                     lse.set(0, h, n, 0, lse.get(0, h, n) / std::log(2.0));
                 return result;
               }});
  return b;
}

using Param = std::tuple<Bug, DType>;

class CheckSensitivity : public ::testing::TestWithParam<Param> {};

TEST_P(CheckSensitivity, BugIsRejected) {
  const Bug& bug = std::get<0>(GetParam());
  AttentionCase c = base_case(std::get<1>(GetParam()));
  bug.truth(c);
  SCOPED_TRACE(c.describe());
  const AttentionInputs in = make_inputs(c);
  const OracleResult ref = run_oracle(in, c.options, !bug.forward_only);
  const auto [fwd, grads] = bug.run(in, c.options);
  const Tolerance tol = float32_kernel_tolerance(c.dtype);
  const CheckReport f = check_forward(fwd, ref.fwd, tol);
  const bool control = bug.name == "control_no_bug";
  bool rejected = !f.passed();
  std::string text = f.text();
  if (!bug.forward_only) {
    const CheckReport b = check_backward(c, grads, ref.grads, tol);
    rejected = rejected || !b.passed();
    text += "\n" + b.text();
  }
  if (control) {
    EXPECT_FALSE(rejected) << "the correct kernel was rejected:\n" << text;
  } else {
    EXPECT_TRUE(rejected) << "bug " << bug.name << " went unnoticed:\n" << text;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Bugs, CheckSensitivity,
    ::testing::Combine(::testing::ValuesIn(bugs()),
                       ::testing::Values(DType::f32, DType::f16, DType::bf16)),
    [](const auto& info) {
      return std::get<0>(info.param).name + "_" + flashpp::to_string(std::get<1>(info.param));
    });

}  // namespace
}  // namespace flashpp::test
