#include "attention_case.hpp"

#include <cmath>
#include <sstream>

#include "random.hpp"

namespace flashpp::test {

std::string AttentionCase::describe() const {
  const Options& o = options;
  std::ostringstream s;
  s << "B=" << shape.B << " Nq=" << shape.Nq << " Nk=" << shape.Nk << " Hq=" << shape.Hq
    << " Hkv=" << shape.Hkv << " D=" << shape.D << " " << flashpp::to_string(dtype) << " "
    << to_string(layout) << (o.causal ? " causal" : " non-causal")
    << (o.alignment == Alignment::bottom_right ? " bottom_right" : " top_left") << " window=("
    << o.window_left << "," << o.window_right << ") softcap=" << o.softcap
    << " dropout=" << o.dropout_p << " (seed " << o.seed << ", offset " << o.offset << ")"
    << " scale=";
  if (std::isnan(o.softmax_scale) || o.softmax_scale <= 0.0f) {
    s << "default";
  } else {
    s << o.softmax_scale;
  }
  s << (o.deterministic ? " deterministic" : "") << " seed=" << seed;
  return s.str();
}

AttentionInputs AttentionInputs::to_f64() const {
  return AttentionInputs{q.converted(DType::f64), k.converted(DType::f64),
                         v.converted(DType::f64), dout.converted(DType::f64)};
}

AttentionInputs make_inputs(const AttentionCase& c) {
  const AttentionShape& s = c.shape;
  AttentionInputs in;
  in.q = HostTensor::attention(c.dtype, s.B, s.Nq, s.Hq, s.D, c.layout);
  in.k = HostTensor::attention(c.dtype, s.B, s.Nk, s.Hkv, s.D, c.layout);
  in.v = HostTensor::attention(c.dtype, s.B, s.Nk, s.Hkv, s.D, c.layout);
  in.dout = HostTensor::attention(c.dtype, s.B, s.Nq, s.Hq, s.D, c.layout);
  in.q.fill_normal(derive_seed(c.seed, 0));
  in.k.fill_normal(derive_seed(c.seed, 1));
  in.v.fill_normal(derive_seed(c.seed, 2));
  in.dout.fill_normal(derive_seed(c.seed, 3));
  return in;
}

ForwardOutputs run_forward(const AttentionInputs& in, Options options, Backend backend) {
  options.backend = backend;
  const DType lse_dtype = in.q.dtype() == DType::f64 ? DType::f64 : DType::f32;
  ForwardOutputs out;
  out.o = in.q.like();
  out.lse = HostTensor::lse(lse_dtype, in.q.size(0), in.q.size(2), in.q.size(1), in.q.layout());
  flashpp::forward(in.q.view(), in.k.view(), in.v.view(), out.o.view(), out.lse.view(), options);
  return out;
}

Gradients run_backward(const AttentionInputs& in, const ForwardOutputs& fwd, Options options,
                       Backend backend) {
  options.backend = backend;
  Gradients g{in.q.like(), in.k.like(), in.v.like()};
  flashpp::backward(in.q.view(), in.k.view(), in.v.view(), fwd.o.view(), fwd.lse.view(),
                    in.dout.view(), g.dq.view(), g.dk.view(), g.dv.view(), options);
  return g;
}

OracleResult run_oracle(const AttentionInputs& in, const Options& options, bool with_backward) {
  const AttentionInputs ref = in.to_f64();
  OracleResult r;
  r.fwd = run_forward(ref, options, Backend::cpu_reference);
  if (with_backward) r.grads = run_backward(ref, r.fwd, options, Backend::cpu_reference);
  return r;
}

double unit_roundoff(DType dtype) {
  switch (dtype) {
    case DType::f32: return std::ldexp(1.0, -24);
    case DType::f16: return std::ldexp(1.0, -11);
    case DType::bf16: return std::ldexp(1.0, -8);
    case DType::e4m3: return std::ldexp(1.0, -4);
    case DType::f64: return std::ldexp(1.0, -53);
  }
  return 0.0;
}

}  // namespace flashpp::test
