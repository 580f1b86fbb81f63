#include "launch_plans.hpp"

#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "flashpp/flashpp.hpp"

namespace flashpp::python {
namespace {

namespace nb = nanobind;
using namespace nb::literals;

// A tensor's metadata from Python: (dtype code, device type, device index, sizes, strides),
// codes as in include/flashpp/flashpp.hpp (DType, DeviceType).
using Meta = std::tuple<int, int, int, std::vector<std::int64_t>, std::vector<std::int64_t>>;

TensorView to_view(const Meta& m, const char* name) {
  const auto& [dtype, device_type, device_index, sizes, strides] = m;
  if (sizes.size() != strides.size() || sizes.size() > TensorView::kMaxRank) {
    throw nb::value_error((std::string("flashpp: ") + name + ": bad metadata").c_str());
  }
  TensorView v;
  v.dtype = static_cast<DType>(dtype);
  v.device = Device{static_cast<DeviceType>(device_type), device_index};
  v.rank = static_cast<int>(sizes.size());
  for (int d = 0; d < v.rank; ++d) {
    v.sizes[d] = sizes[d];
    v.strides[d] = strides[d];
  }
  return v;
}

TensorView with_data(TensorView v, std::uintptr_t data) {
  v.data = reinterpret_cast<void*>(data);
  return v;
}

Options with_rng(Options o, std::uint64_t seed, std::uint64_t offset) {
  o.seed = seed;
  o.offset = offset;
  return o;
}

Workspace workspace_at(std::uintptr_t data, std::size_t bytes) {
  return data != 0 ? Workspace{reinterpret_cast<void*>(data), bytes} : Workspace{};
}

// Seconds taken by `calls` back-to-back calls of fn() (GIL released): the C++ side of a call
// alone, no Python in between (tools/profile_eager.py compares it with the whole call).
template <typename Fn>
double seconds_for(int calls, const Fn& fn) {
  nb::gil_scoped_release no_gil;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

struct ForwardPlan {
  TensorView q, k, v, o, lse;
  Options options;
  std::size_t workspace_bytes = 0;

  // The workspace query validates q, k, v, data pointers included: those of the first call.
  ForwardPlan(const Meta& q_, const Meta& k_, const Meta& v_, const Meta& o_, const Meta& lse_,
              const Options& opt, std::uintptr_t q_data, std::uintptr_t k_data,
              std::uintptr_t v_data)
      : q(to_view(q_, "q")), k(to_view(k_, "k")), v(to_view(v_, "v")), o(to_view(o_, "o")),
        lse(to_view(lse_, "lse")), options(opt) {
    workspace_bytes = forward_workspace_size(with_data(q, q_data), with_data(k, k_data),
                                             with_data(v, v_data), options);
  }

  void run(std::uintptr_t q_data, std::uintptr_t k_data, std::uintptr_t v_data,
           std::uintptr_t o_data, std::uintptr_t lse_data, std::uint64_t seed,
           std::uint64_t offset, std::uintptr_t stream, std::uintptr_t workspace) const {
    const TensorView Q = with_data(q, q_data), K = with_data(k, k_data), V = with_data(v, v_data),
                     O = with_data(o, o_data), L = with_data(lse, lse_data);
    const Options opt = with_rng(options, seed, offset);
    nb::gil_scoped_release no_gil;  // the tensors stay alive: the caller holds them
    forward(Q, K, V, O, L, opt, reinterpret_cast<void*>(stream),
            workspace_at(workspace, workspace_bytes));
  }

  // run() `calls` times from C++ (same pointers each time); returns the seconds taken.
  double time_run(int calls, std::uintptr_t q_data, std::uintptr_t k_data, std::uintptr_t v_data,
                  std::uintptr_t o_data, std::uintptr_t lse_data, std::uintptr_t stream,
                  std::uintptr_t workspace) const {
    const TensorView Q = with_data(q, q_data), K = with_data(k, k_data), V = with_data(v, v_data),
                     O = with_data(o, o_data), L = with_data(lse, lse_data);
    const Workspace W = workspace_at(workspace, workspace_bytes);
    return seconds_for(calls, [&] {
      forward(Q, K, V, O, L, options, reinterpret_cast<void*>(stream), W);
    });
  }
};

struct BackwardPlan {
  TensorView q, k, v, o, lse, dout, dq, dk, dv;
  Options options;
  std::size_t workspace_bytes = 0;

  BackwardPlan(const std::vector<Meta>& metas, const Options& opt,
               const std::vector<std::uintptr_t>& data)
      : options(opt) {
    static const char* kNames[] = {"q", "k", "v", "o", "lse", "dout", "dq", "dk", "dv"};
    if (metas.size() != 9 || data.size() != 9) {
      throw nb::value_error("flashpp: a backward plan takes 9 tensors");
    }
    TensorView* views[] = {&q, &k, &v, &o, &lse, &dout, &dq, &dk, &dv};
    for (int t = 0; t < 9; ++t) *views[t] = to_view(metas[t], kNames[t]);
    workspace_bytes = backward_workspace_size(with_data(q, data[0]), with_data(k, data[1]),
                                              with_data(v, data[2]), options);
  }

  void run(const std::vector<std::uintptr_t>& data, std::uint64_t seed, std::uint64_t offset,
           std::uintptr_t stream, std::uintptr_t workspace) const {
    if (data.size() != 9) throw nb::value_error("flashpp: a backward plan takes 9 tensors");
    const Options opt = with_rng(options, seed, offset);
    const TensorView Q = with_data(q, data[0]), K = with_data(k, data[1]),
                     V = with_data(v, data[2]), O = with_data(o, data[3]),
                     L = with_data(lse, data[4]), dO = with_data(dout, data[5]),
                     dQ = with_data(dq, data[6]), dK = with_data(dk, data[7]),
                     dV = with_data(dv, data[8]);
    nb::gil_scoped_release no_gil;
    backward(Q, K, V, O, L, dO, dQ, dK, dV, opt, reinterpret_cast<void*>(stream),
             workspace_at(workspace, workspace_bytes));
  }

  double time_run(int calls, const std::vector<std::uintptr_t>& data, std::uintptr_t stream,
                  std::uintptr_t workspace) const {
    if (data.size() != 9) throw nb::value_error("flashpp: a backward plan takes 9 tensors");
    const TensorView Q = with_data(q, data[0]), K = with_data(k, data[1]),
                     V = with_data(v, data[2]), O = with_data(o, data[3]),
                     L = with_data(lse, data[4]), dO = with_data(dout, data[5]),
                     dQ = with_data(dq, data[6]), dK = with_data(dk, data[7]),
                     dV = with_data(dv, data[8]);
    const Workspace W = workspace_at(workspace, workspace_bytes);
    return seconds_for(calls, [&] {
      backward(Q, K, V, O, L, dO, dQ, dK, dV, options, reinterpret_cast<void*>(stream), W);
    });
  }
};

}  // namespace

void bind_launch_plans(nb::module_& m) {
  nb::class_<ForwardPlan>(m, "ForwardPlan")
      .def(nb::init<const Meta&, const Meta&, const Meta&, const Meta&, const Meta&,
                    const Options&, std::uintptr_t, std::uintptr_t, std::uintptr_t>(),
           "q"_a, "k"_a, "v"_a, "o"_a, "lse"_a, "options"_a, "q_data"_a, "k_data"_a, "v_data"_a)
      .def_ro("workspace_bytes", &ForwardPlan::workspace_bytes)
      .def("run", &ForwardPlan::run, "q"_a, "k"_a, "v"_a, "o"_a, "lse"_a, "seed"_a, "offset"_a,
           "stream"_a, "workspace"_a,
           "The forward on these data pointers (the plan's shapes, strides, dtype, device).")
      .def("time_run", &ForwardPlan::time_run, "calls"_a, "q"_a, "k"_a, "v"_a, "o"_a, "lse"_a,
           "stream"_a, "workspace"_a,
           "Seconds taken by `calls` runs from C++ (host time of the C++ side alone; the\n"
           "plan's options, seed and offset 0). For profiling (tools/profile_eager.py).");
  nb::class_<BackwardPlan>(m, "BackwardPlan")
      .def(nb::init<const std::vector<Meta>&, const Options&, const std::vector<std::uintptr_t>&>(),
           "tensors"_a, "options"_a, "data"_a)
      .def_ro("workspace_bytes", &BackwardPlan::workspace_bytes)
      .def("run", &BackwardPlan::run, "data"_a, "seed"_a, "offset"_a, "stream"_a, "workspace"_a,
           "The backward on these data pointers (q, k, v, o, lse, dout, dq, dk, dv).")
      .def("time_run", &BackwardPlan::time_run, "calls"_a, "data"_a, "stream"_a, "workspace"_a,
           "Seconds taken by `calls` runs from C++ (see ForwardPlan.time_run).");
}

}  // namespace flashpp::python
