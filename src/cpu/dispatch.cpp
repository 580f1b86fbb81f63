// Run-time choice of the CPU kernel: one build of the library carries the kernels of every
// instruction set (src/cpu/kernels/ compiled once per level, see CMakeLists.txt) and runs the
// best one the machine supports (cpu_features.hpp), or the one FLASHPP_CPU_ISA names.
//
//   f32, f16 storage: the float32 kernels of the level (generic, avx2, avx512; the avx512bf16
//                     and amx levels use the avx512 ones)
//   bf16 storage:     forward and backward on the AMX engine (tdpbf16ps tiles) at level amx,
//                     on the AVX512-BF16 engine (vdpbf16ps) only when FLASHPP_CPU_ISA=avx512bf16
//                     asks (see below), on the AMX engine's emulated tiles when
//                     FLASHPP_CPU_ISA=amx_emulated asks (tests); otherwise the float32 kernels
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "cpu_backend.hpp"
#include "cpu_features.hpp"

FLASHPP_DECLARE_CPU_KERNELS(isa_generic)
FLASHPP_DECLARE_CPU_KERNELS(isa_avx2)
FLASHPP_DECLARE_CPU_KERNELS(isa_avx512)
FLASHPP_DECLARE_CPU_BF16_KERNELS(isa_avx512bf16)
FLASHPP_DECLARE_CPU_BF16_KERNELS(isa_amx)
FLASHPP_DECLARE_CPU_BF16_KERNELS(isa_amx_emulated)
// (FLASHPP_CPU_MAX_LEVEL: the highest level this build compiled, see CMakeLists.txt;
// FLASHPP_CPU_AMX_EMULATION: whether it compiled the amx_emulated engines.)

namespace flashpp::cpu {
namespace {

// The level whose float32 kernels run at `level`.
IsaLevel f32_kernel_level(IsaLevel level) {
  return level >= IsaLevel::avx512 ? IsaLevel::avx512 : level;
}

enum class Bf16Engine { none, avx512bf16, amx, amx_emulated };

// The AMX engine runs whenever the level is amx. The AVX512-BF16 engine only when asked for
// (FLASHPP_CPU_ISA=avx512bf16): on the Intel Xeon it was measured on, vdpbf16ps retires at a
// quarter of vfmadd231ps's rate (half its flops), and the engine ran at 0.4x the float32 path
// (docs/cpu-backend.md); CPUs with fast bf16 dot products (AMD Zen 4) are unmeasured.
Bf16Engine bf16_engine(IsaLevel level, bool all_bf16) {
  if (!all_bf16) return Bf16Engine::none;
  if (amx_emulation_requested()) return Bf16Engine::amx_emulated;  // active_isa() checked it
  if (level == IsaLevel::amx) return Bf16Engine::amx;
  if (level == IsaLevel::avx512bf16 && std::getenv("FLASHPP_CPU_ISA") != nullptr) {
    return Bf16Engine::avx512bf16;
  }
  return Bf16Engine::none;
}

}  // namespace

std::string kernel_name(DType dtype, bool backward) {
  const IsaLevel level = active_isa();
  switch (bf16_engine(level, dtype == DType::bf16)) {
    case Bf16Engine::amx:
      return backward ? "amx bf16 backward (tdpbf16ps tiles)" : "amx bf16 (tdpbf16ps tiles)";
    case Bf16Engine::amx_emulated:
      return backward ? "amx_emulated bf16 backward (tdpbf16ps emulated, test level)"
                      : "amx_emulated bf16 (tdpbf16ps emulated, test level)";
    case Bf16Engine::avx512bf16:
      return backward ? "avx512bf16 bf16 backward (vdpbf16ps)" : "avx512bf16 bf16 (vdpbf16ps)";
    case Bf16Engine::none: break;
  }
  return std::string(to_string(f32_kernel_level(level))) + " f32";
}

void flash_forward(const detail::ForwardArgs& a) {
  const IsaLevel level = active_isa();
  const bool all_bf16 =
      a.q.dtype == DType::bf16 && a.k.dtype == DType::bf16 && a.v.dtype == DType::bf16;
  switch (bf16_engine(level, all_bf16)) {
#if FLASHPP_CPU_MAX_LEVEL >= 4
    case Bf16Engine::amx: isa_amx::flash_forward_bf16(a); return;
#endif
#if FLASHPP_CPU_MAX_LEVEL >= 3
    case Bf16Engine::avx512bf16: isa_avx512bf16::flash_forward_bf16(a); return;
#endif
#if FLASHPP_CPU_AMX_EMULATION
    case Bf16Engine::amx_emulated: isa_amx_emulated::flash_forward_bf16(a); return;
#endif
    default: break;
  }
  switch (f32_kernel_level(level)) {
    case IsaLevel::avx512: isa_avx512::flash_forward(a); return;
    case IsaLevel::avx2: isa_avx2::flash_forward(a); return;
    default: isa_generic::flash_forward(a); return;
  }
}

void throw_scratch_allocation_failure(const char* call) {
  throw Error(ErrorCode::backend_failure,
              std::string(call) + ": the CPU backend could not allocate its per-thread scratch");
}

std::size_t backward_workspace_size(const detail::Problem& p) {
  return static_cast<std::size_t>(p.B * p.Hq * p.Nq) * sizeof(float);
}

void flash_backward(const detail::BackwardArgs& a) {
  const detail::Problem& p = a.problem;
  if (p.B == 0 || p.Hq == 0) return;
  const IsaLevel level = active_isa();
  // D = rowsum(dO * O) goes into the caller's workspace, or into our own when none (or too
  // little) is given.
  std::vector<float> own;
  float* d_rows = static_cast<float*>(a.workspace.data);
  if (d_rows == nullptr || a.workspace.bytes < backward_workspace_size(p)) {
    try {
      own.resize(static_cast<std::size_t>(p.B * p.Hq * p.Nq));
    } catch (const std::bad_alloc&) {
      throw Error(ErrorCode::backend_failure,
                  "flashpp::backward: the CPU backend could not allocate its workspace (" +
                      std::to_string(backward_workspace_size(p)) + " bytes); pass one");
    }
    d_rows = own.data();
  }
  // The bf16 engines read Q, K, V and dO as bf16 operands (O only enters D = rowsum(dO * O)).
  const bool all_bf16 = a.q.dtype == DType::bf16 && a.k.dtype == DType::bf16 &&
                        a.v.dtype == DType::bf16 && a.dout.dtype == DType::bf16;
  switch (bf16_engine(level, all_bf16)) {
#if FLASHPP_CPU_MAX_LEVEL >= 4
    case Bf16Engine::amx: isa_amx::flash_backward_bf16(a, d_rows); return;
#endif
#if FLASHPP_CPU_MAX_LEVEL >= 3
    case Bf16Engine::avx512bf16: isa_avx512bf16::flash_backward_bf16(a, d_rows); return;
#endif
#if FLASHPP_CPU_AMX_EMULATION
    case Bf16Engine::amx_emulated: isa_amx_emulated::flash_backward_bf16(a, d_rows); return;
#endif
    default: break;
  }
  switch (f32_kernel_level(level)) {
    case IsaLevel::avx512: isa_avx512::flash_backward(a, d_rows); return;
    case IsaLevel::avx2: isa_avx2::flash_backward(a, d_rows); return;
    default: isa_generic::flash_backward(a, d_rows); return;
  }
}

}  // namespace flashpp::cpu
