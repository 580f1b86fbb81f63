#include "host_probe.hpp"

#include <nanobind/stl/map.h>
#include <nanobind/stl/string.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>

#if defined(FLASHPP_WITH_CUDA)
#include <cuda_runtime.h>

#include "cuda/common/tensor_map.hpp"
#endif

namespace flashpp::python {
namespace {

namespace nb = nanobind;

template <typename Fn>
double us_per_call(int calls, const Fn& fn) {
  for (int i = 0; i < calls / 10 + 1; ++i) fn();  // warm
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) fn();
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
             .count() / calls;
}

// Microseconds per call of each host-side step on the current device (empty without CUDA).
// The tensor maps are those of a [1, 128, 8, 64] fp16 view at a made-up 256-byte aligned
// address (encoding reads no memory); launches, shared-memory opt-ins and occupancy queries
// need kernels and are measured by the layers of tools/profile_eager.py instead.
std::map<std::string, double> host_probe(int calls) {
  std::map<std::string, double> us;
#if defined(FLASHPP_WITH_CUDA)
  nb::gil_scoped_release no_gil;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return us;
  }
  volatile int sink = 0;
  us["cudaGetDeviceCount"] = us_per_call(calls, [&] {
    int n = 0;
    cudaGetDeviceCount(&n);
    sink = n;
  });
  us["cudaGetDevice"] = us_per_call(calls, [&] {
    int d = 0;
    cudaGetDevice(&d);
    sink = d;
  });
  us["cudaSetDevice (already current)"] = us_per_call(calls, [&] { cudaSetDevice(device); });
  us["cudaDeviceGetAttribute"] = us_per_call(calls, [&] {
    int v = 0;
    cudaDeviceGetAttribute(&v, cudaDevAttrComputeCapabilityMajor, device);
    sink = v;
  });
  us["cudaGetLastError"] = us_per_call(calls, [&] { sink = static_cast<int>(cudaGetLastError()); });
  us["getenv (FLASHPP_CUDA_FAMILY)"] = us_per_call(calls, [&] {
    sink = std::getenv("FLASHPP_CUDA_FAMILY") != nullptr;
  });
  const void* fake = reinterpret_cast<const void*>(std::uintptr_t{1} << 40);
  CUtensorMap map;
  us["tensor map, driver encode"] = us_per_call(calls, [&] {
    sink = flashpp::cuda::encode_row_tile_map(&map, fake, DType::f16, 1, 128, 8, 64, 65536, 512,
                                              64, 128);
  });
  us["tensor map, remembered"] = us_per_call(calls, [&] {
    sink = flashpp::cuda::make_row_tile_map(&map, fake, DType::f16, 1, 128, 8, 64, 65536, 512,
                                            64, 128);
  });
  (void)sink;
#else
  (void)calls;
#endif
  return us;
}

}  // namespace

void bind_host_probe(nb::module_& m) {
  m.def("_host_probe", &host_probe, nb::arg("calls") = 10000,
        "Microseconds per call of the CUDA runtime/driver steps of a launch, each alone\n"
        "(empty in a build without CUDA). For tools/profile_eager.py.");
}

}  // namespace flashpp::python
