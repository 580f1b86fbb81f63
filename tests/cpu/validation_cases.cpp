#include "validation_cases.hpp"

#include <cmath>

namespace flashpp::test {

ValidCall::ValidCall(DType dtype) {
  constexpr std::int64_t B = 2, Nq = 5, Nk = 7, Hq = 4, Hkv = 2, D = 8;
  q_buf = HostTensor::attention(dtype, B, Nq, Hq, D, Layout::bnhd);
  k_buf = HostTensor::attention(dtype, B, Nk, Hkv, D, Layout::bnhd);
  v_buf = HostTensor::attention(dtype, B, Nk, Hkv, D, Layout::bnhd);
  dout_buf = q_buf.like();
  q_buf.fill_normal(1);
  k_buf.fill_normal(2);
  v_buf.fill_normal(3);
  dout_buf.fill_normal(4);
  o_buf = q_buf.like();
  dq_buf = q_buf.like();
  dk_buf = k_buf.like();
  dv_buf = k_buf.like();
  lse_buf = HostTensor::lse(dtype == DType::f64 ? DType::f64 : DType::f32, B, Hq, Nq);
  q = q_buf.view();
  k = k_buf.view();
  v = v_buf.view();
  o = o_buf.view();
  lse = lse_buf.view();
  dout = dout_buf.view();
  dq = dq_buf.view();
  dk = dk_buf.view();
  dv = dv_buf.view();
  options.backend = Backend::cpu;
  // The backward reads o and lse: give it finite ones (poisoned again for the forward checks).
  o_buf.fill(0.5);
  lse_buf.fill(1.0);
}

bool ValidCall::outputs_untouched(bool backward) const {
  auto all_nan = [](const HostTensor& t) {
    for (double x : t.values())
      if (!std::isnan(x)) return false;
    return true;
  };
  if (!backward) return all_nan(o_buf) && all_nan(lse_buf);
  return all_nan(dq_buf) && all_nan(dk_buf) && all_nan(dv_buf);
}

namespace {

constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
const Device kCuda{DeviceType::cuda, 0};

// Forward cases check o/lse are untouched by poisoning them first.
void poison_forward_outputs(ValidCall& c) {
  c.o_buf.poison();
  c.lse_buf.poison();
}

}  // namespace

std::vector<BadInputCase> bad_input_cases() {
  using E = ErrorCode;
  const E invalid = E::invalid_argument;
  std::vector<BadInputCase> cases;
  auto fwd = [&](std::string name, std::string arg, E code, std::function<void(ValidCall&)> f) {
    cases.push_back({"forward_" + name, false, arg, code, [f](ValidCall& c) {
                       poison_forward_outputs(c);
                       f(c);
                     }});
  };
  auto bwd = [&](std::string name, std::string arg, E code, std::function<void(ValidCall&)> f) {
    cases.push_back({"backward_" + name, true, arg, code, f});
  };
  auto both = [&](std::string name, std::string arg, E code, std::function<void(ValidCall&)> f) {
    fwd(name, arg, code, f);
    bwd(name, arg, code, f);
  };

  // Shapes.
  both("q_rank_3", "q", invalid, [](ValidCall& c) { c.q.rank = 3; });
  both("q_negative_size", "q", invalid, [](ValidCall& c) { c.q.sizes[1] = -1; });
  both("k_batch_mismatch", "k", invalid, [](ValidCall& c) { c.k.sizes[0] = 1; });
  both("k_head_dim_mismatch", "k", invalid, [](ValidCall& c) { c.k.sizes[3] = 4; });
  both("v_length_mismatch", "v", invalid, [](ValidCall& c) { c.v.sizes[1] = 6; });
  both("v_heads_mismatch", "v", invalid, [](ValidCall& c) { c.v.sizes[2] = 1; });
  both("hq_not_multiple_of_hkv", "k", invalid, [](ValidCall& c) { c.q.sizes[2] = 3; });
  both("hq_zero_with_kv_heads", "k", invalid, [](ValidCall& c) { c.q.sizes[2] = 0; });
  both("head_dim_zero", "q", invalid, [](ValidCall& c) {
    c.q.sizes[3] = c.k.sizes[3] = c.v.sizes[3] = 0;
  });
  both("sequence_of_2_pow_32", "q", invalid, [](ValidCall& c) {
    c.q.sizes[1] = std::int64_t(1) << 32;  // stride 0 keeps offsets small: only the limit trips
    c.q.strides[1] = 0;
  });
  fwd("o_shape_mismatch", "o", invalid, [](ValidCall& c) { c.o.sizes[1] = 4; });
  bwd("o_shape_mismatch", "o", invalid, [](ValidCall& c) { c.o.sizes[1] = 4; });
  bwd("dout_shape_mismatch", "dout", invalid, [](ValidCall& c) { c.dout.sizes[2] = 2; });
  bwd("dq_shape_mismatch", "dq", invalid, [](ValidCall& c) { c.dq.sizes[0] = 1; });
  bwd("dk_shape_mismatch", "dk", invalid, [](ValidCall& c) { c.dk.sizes[1] = 6; });
  bwd("dv_shape_mismatch", "dv", invalid, [](ValidCall& c) { c.dv.sizes[3] = 4; });

  // lse.
  both("lse_wrong_shape", "lse", invalid, [](ValidCall& c) { c.lse.sizes[2] = 6; });
  both("lse_wrong_rank", "lse", invalid, [](ValidCall& c) { c.lse.rank = 4; });
  both("lse_f16", "lse", invalid, [](ValidCall& c) { c.lse.dtype = DType::f16; });
  both("lse_f64_with_cpu", "lse", invalid, [](ValidCall& c) { c.lse.dtype = DType::f64; });
  both("lse_missing", "lse", invalid, [](ValidCall& c) { c.lse = TensorView{}; });
  both("lse_zero_stride", "lse", invalid, [](ValidCall& c) { c.lse.strides[1] = 0; });

  // Dtypes.
  both("f64_with_cpu_backend", "q", E::unsupported, [](ValidCall& c) {
    for (TensorView* t : {&c.q, &c.k, &c.v, &c.o, &c.dout, &c.dq, &c.dk, &c.dv})
      t->dtype = DType::f64;
  });
  both("q_unknown_dtype", "q", invalid, [](ValidCall& c) { c.q.dtype = static_cast<DType>(7); });
  both("i32_inputs", "q", E::unsupported, [](ValidCall& c) {
    for (TensorView* t : {&c.q, &c.k, &c.v}) t->dtype = DType::i32;
  });
  both("v_mixed_dtype", "v", invalid, [](ValidCall& c) { c.v.dtype = DType::f16; });
  both("k_mixed_dtype", "k", invalid, [](ValidCall& c) { c.k.dtype = DType::bf16; });
  fwd("o_mixed_dtype", "o", invalid, [](ValidCall& c) { c.o.dtype = DType::f16; });
  bwd("dout_mixed_dtype", "dout", invalid, [](ValidCall& c) { c.dout.dtype = DType::bf16; });
  bwd("dv_mixed_dtype", "dv", invalid, [](ValidCall& c) { c.dv.dtype = DType::bf16; });

  // Strides.
  both("q_last_stride_2", "q", invalid, [](ValidCall& c) { c.q.strides[3] = 2; });
  both("k_last_stride_0", "k", invalid, [](ValidCall& c) { c.k.strides[3] = 0; });
  fwd("o_last_stride_2", "o", invalid, [](ValidCall& c) { c.o.strides[3] = 2; });
  bwd("dq_last_stride_2", "dq", invalid, [](ValidCall& c) { c.dq.strides[3] = 2; });
  both("lse_last_stride_2", "lse", invalid, [](ValidCall& c) { c.lse.strides[2] = 2; });
  both("v_negative_stride", "v", invalid, [](ValidCall& c) { c.v.strides[1] = -16; });
  bwd("dk_negative_stride", "dk", invalid, [](ValidCall& c) { c.dk.strides[0] = -1; });
  fwd("o_zero_stride", "o", invalid, [](ValidCall& c) { c.o.strides[1] = 0; });
  bwd("dq_zero_stride", "dq", invalid, [](ValidCall& c) { c.dq.strides[2] = 0; });
  bwd("dk_zero_stride", "dk", invalid, [](ValidCall& c) { c.dk.strides[0] = 0; });
  bwd("dv_zero_stride", "dv", invalid, [](ValidCall& c) { c.dv.strides[1] = 0; });
  both("q_offset_overflows_int64", "q", invalid, [](ValidCall& c) { c.q.strides[0] = kMax / 2; });
  both("k_byte_offset_overflows_int64", "k", invalid,
       [](ValidCall& c) { c.k.strides[1] = kMax / 16; });
  both("q_element_count_overflows_int64", "q", invalid, [](ValidCall& c) {
    c.q.sizes[0] = std::int64_t(1) << 40;
    c.q.sizes[1] = std::int64_t(1) << 40;
    c.q.strides[0] = c.q.strides[1] = 0;
  });
  fwd("o_offset_overflows_int64", "o", invalid, [](ValidCall& c) { c.o.strides[2] = kMax / 3; });

  // Null data.
  both("q_null", "q", invalid, [](ValidCall& c) { c.q.data = nullptr; });
  fwd("o_null", "o", invalid, [](ValidCall& c) { c.o.data = nullptr; });
  both("lse_null", "lse", invalid, [](ValidCall& c) { c.lse.data = nullptr; });
  bwd("dk_null", "dk", invalid, [](ValidCall& c) { c.dk.data = nullptr; });
  bwd("dout_null", "dout", invalid, [](ValidCall& c) { c.dout.data = nullptr; });

  // Devices.
  both("k_on_cuda", "k", invalid, [](ValidCall& c) { c.k.device = kCuda; });
  fwd("o_on_cuda", "o", invalid, [](ValidCall& c) { c.o.device = kCuda; });
  both("lse_on_cuda", "lse", invalid, [](ValidCall& c) { c.lse.device = kCuda; });
  bwd("dv_on_cuda", "dv", invalid, [](ValidCall& c) { c.dv.device = kCuda; });
  both("cpu_backend_with_cuda_tensors", "options.backend", invalid, [](ValidCall& c) {
    for (TensorView* t : {&c.q, &c.k, &c.v, &c.o, &c.lse, &c.dout, &c.dq, &c.dk, &c.dv})
      t->device = kCuda;
  });
  both("cuda_backend_with_cpu_tensors", "options.backend", invalid,
       [](ValidCall& c) { c.options.backend = Backend::cuda; });
  both("unknown_backend", "options.backend", invalid,
       [](ValidCall& c) { c.options.backend = static_cast<Backend>(9); });

  // Options.
  both("dropout_negative", "options.dropout_p", invalid,
       [](ValidCall& c) { c.options.dropout_p = -0.1f; });
  both("dropout_one", "options.dropout_p", invalid,
       [](ValidCall& c) { c.options.dropout_p = 1.0f; });
  both("dropout_nan", "options.dropout_p", invalid,
       [](ValidCall& c) { c.options.dropout_p = std::nanf(""); });
  both("softcap_nan", "options.softcap", invalid,
       [](ValidCall& c) { c.options.softcap = std::nanf(""); });
  both("softcap_negative", "options.softcap", invalid,
       [](ValidCall& c) { c.options.softcap = -1.0f; });
  both("softcap_infinite", "options.softcap", invalid,
       [](ValidCall& c) { c.options.softcap = INFINITY; });
  both("scale_infinite", "options.softmax_scale", invalid,
       [](ValidCall& c) { c.options.softmax_scale = INFINITY; });
  both("window_left_minus_2", "options.window_left", invalid,
       [](ValidCall& c) { c.options.window_left = -2; });
  both("window_right_minus_5", "options.window_right", invalid,
       [](ValidCall& c) { c.options.window_right = -5; });
  both("causal_with_window_right", "options.window_right", invalid, [](ValidCall& c) {
    c.options.causal = true;
    c.options.window_right = 3;
  });
  both("unknown_alignment", "options.alignment", invalid,
       [](ValidCall& c) { c.options.alignment = static_cast<Alignment>(2); });

  // Workspace.
  both("workspace_null_with_bytes", "workspace", invalid,
       [](ValidCall& c) { c.workspace = Workspace{nullptr, 64}; });
  return cases;
}

}  // namespace flashpp::test
