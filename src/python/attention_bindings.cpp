#include "attention_bindings.hpp"

#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>

#include <cstdint>
#include <optional>

#include "flashpp/flashpp.hpp"
#include "tensor_views.hpp"

namespace flashpp::python {
namespace {

namespace nb = nanobind;
using namespace nb::literals;

void* as_stream(std::uintptr_t stream) { return reinterpret_cast<void*>(stream); }

std::size_t forward_workspace_size_py(const InputArray& q, const InputArray& k,
                                      const InputArray& v, const Options& options,
                                      bool uint16_is_bf16) {
  const ViewRules rules{uint16_is_bf16};
  return forward_workspace_size(to_view(q, "q", rules), to_view(k, "k", rules),
                                to_view(v, "v", rules), options);
}

std::size_t backward_workspace_size_py(const InputArray& q, const InputArray& k,
                                       const InputArray& v, const Options& options,
                                       bool uint16_is_bf16) {
  const ViewRules rules{uint16_is_bf16};
  return backward_workspace_size(to_view(q, "q", rules), to_view(k, "k", rules),
                                 to_view(v, "v", rules), options);
}

void forward_py(const InputArray& q, const InputArray& k, const InputArray& v,
                const OutputArray& o, const std::optional<OutputArray>& lse,
                const Options& options, std::uintptr_t stream,
                const std::optional<OutputArray>& workspace, bool uint16_is_bf16) {
  const ViewRules rules{uint16_is_bf16};
  const TensorView Q = to_view(q, "q", rules), K = to_view(k, "k", rules),
                   V = to_view(v, "v", rules), O = to_view(o, "o", rules);
  const TensorView L = lse ? to_view(*lse, "lse", rules) : TensorView{};
  const Workspace W = to_workspace(workspace ? &*workspace : nullptr);
  nb::gil_scoped_release no_gil;  // the arrays stay alive: their Python owners hold them
  forward(Q, K, V, O, L, options, as_stream(stream), W);
}

// The FP8 forward: q, k, v are e4m3 arrays passed as their uint8 bits; o is f16 or bf16 (bf16
// from numpy as uint16 bits with uint16_is_bf16); descales float32 [B, Hkv] or None.
void forward_fp8_py(const InputArray& q, const InputArray& k, const InputArray& v,
                    const OutputArray& o, const std::optional<OutputArray>& lse, Options options,
                    const std::optional<InputArray>& q_descale,
                    const std::optional<InputArray>& k_descale,
                    const std::optional<InputArray>& v_descale, std::uintptr_t stream,
                    bool uint16_is_bf16) {
  const ViewRules rules{uint16_is_bf16, true};
  const TensorView Q = to_view(q, "q", rules), K = to_view(k, "k", rules),
                   V = to_view(v, "v", rules), O = to_view(o, "o", rules);
  const TensorView L = lse ? to_view(*lse, "lse", rules) : TensorView{};
  if (q_descale) options.q_descale = to_view(*q_descale, "q_descale", rules);
  if (k_descale) options.k_descale = to_view(*k_descale, "k_descale", rules);
  if (v_descale) options.v_descale = to_view(*v_descale, "v_descale", rules);
  nb::gil_scoped_release no_gil;
  forward(Q, K, V, O, L, options, as_stream(stream));
}

void backward_py(const InputArray& q, const InputArray& k, const InputArray& v,
                 const InputArray& o, const InputArray& lse, const InputArray& dout,
                 const OutputArray& dq, const OutputArray& dk, const OutputArray& dv,
                 const Options& options, std::uintptr_t stream,
                 const std::optional<OutputArray>& workspace, bool uint16_is_bf16) {
  const ViewRules rules{uint16_is_bf16};
  const TensorView Q = to_view(q, "q", rules), K = to_view(k, "k", rules),
                   V = to_view(v, "v", rules), O = to_view(o, "o", rules),
                   L = to_view(lse, "lse", rules), dO = to_view(dout, "dout", rules),
                   dQ = to_view(dq, "dq", rules), dK = to_view(dk, "dk", rules),
                   dV = to_view(dv, "dv", rules);
  const Workspace W = to_workspace(workspace ? &*workspace : nullptr);
  nb::gil_scoped_release no_gil;
  backward(Q, K, V, O, L, dO, dQ, dK, dV, options, as_stream(stream), W);
}

void bind_options(nb::module_& m) {
  nb::enum_<Alignment>(m, "Alignment")
      .value("top_left", Alignment::top_left)
      .value("bottom_right", Alignment::bottom_right);
  nb::enum_<Backend>(m, "Backend")
      .value("automatic", Backend::automatic)
      .value("cpu", Backend::cpu)
      .value("cuda", Backend::cuda)
      .value("cpu_reference", Backend::cpu_reference);
  // Field meanings: include/flashpp/flashpp.hpp, struct Options.
  nb::class_<Options>(m, "Options")
      .def(nb::init<>())
      .def_rw("softmax_scale", &Options::softmax_scale)
      .def_rw("causal", &Options::causal)
      .def_rw("alignment", &Options::alignment)
      .def_rw("window_left", &Options::window_left)
      .def_rw("window_right", &Options::window_right)
      .def_rw("softcap", &Options::softcap)
      .def_rw("dropout_p", &Options::dropout_p)
      .def_rw("seed", &Options::seed)
      .def_rw("offset", &Options::offset)
      .def_rw("deterministic", &Options::deterministic)
      .def_rw("write_lse", &Options::write_lse)
      .def_rw("backend", &Options::backend);
}

}  // namespace

void bind_attention(nb::module_& m) {
  bind_options(m);
  m.def("forward_workspace_size", &forward_workspace_size_py, "q"_a, "k"_a, "v"_a, "options"_a,
        "uint16_is_bf16"_a = false,
        "Bytes of scratch memory flashpp.forward needs for these inputs and options.");
  m.def("backward_workspace_size", &backward_workspace_size_py, "q"_a, "k"_a, "v"_a,
        "options"_a, "uint16_is_bf16"_a = false,
        "Bytes of scratch memory flashpp.backward needs for these inputs and options.");
  m.def("forward", &forward_py, "q"_a, "k"_a, "v"_a, "o"_a, "lse"_a.none(), "options"_a,
        "stream"_a = 0, "workspace"_a.none() = nb::none(), "uint16_is_bf16"_a = false,
        "o = softmax(q k^T * scale) v and lse, written into the given arrays.\n"
        "q: [B, Nq, Hq, D], k, v: [B, Nk, Hkv, D] (any strides, last stride 1), o like q,\n"
        "lse: float32 [B, Hq, Nq] or None. stream: a cudaStream_t as an int (0 = default).");
  m.def("forward_fp8", &forward_fp8_py, "q"_a, "k"_a, "v"_a, "o"_a, "lse"_a.none(), "options"_a,
        "q_descale"_a.none(), "k_descale"_a.none(), "v_descale"_a.none(), "stream"_a = 0,
        "uint16_is_bf16"_a = false,
        "The FP8 forward: q, k, v float8_e4m3fn passed as uint8 bits, o float16 or bfloat16,\n"
        "descales float32 [B, Hkv] or None (1).");
  m.def("backward", &backward_py, "q"_a, "k"_a, "v"_a, "o"_a, "lse"_a, "dout"_a, "dq"_a, "dk"_a,
        "dv"_a, "options"_a, "stream"_a = 0, "workspace"_a.none() = nb::none(),
        "uint16_is_bf16"_a = false,
        "Gradients dq, dk, dv of the forward with the same options, written into the arrays.");
}

}  // namespace flashpp::python
