// What the CPU (and the operating system) let flashpp's CPU kernels use, and which kernel
// level runs: the best the machine supports, or the one FLASHPP_CPU_ISA names.
#pragma once

namespace flashpp::cpu {

// Kernel levels, each a superset of the one before (a machine that runs one runs those below).
//   generic     x86-64 baseline (SSE2): plain loops
//   avx2        AVX2 + FMA + F16C: 8-lane micro-kernel
//   avx512      AVX-512 F/BW/VL/DQ: 16-lane micro-kernel (f32 compute for every dtype)
//   avx512bf16  + AVX512-BF16: bf16 forward tile products by vdpbf16ps
//   amx         + AMX-TILE/AMX-BF16: bf16 forward tile products by tdpbf16ps
enum class IsaLevel : int { generic = 0, avx2 = 1, avx512 = 2, avx512bf16 = 3, amx = 4 };

const char* to_string(IsaLevel level);

// The highest level this machine supports (cpuid, xgetbv, and for AMX the Linux permission to
// use the tile state, requested once).
IsaLevel supported_isa();

// The level the kernels use: supported_isa(), or FLASHPP_CPU_ISA when set
// (generic|avx2|avx512|avx512bf16|amx; amx_emulated, see below). A level above supported_isa() throws
// flashpp::Error(unsupported): an explicit request is never silently downgraded.
IsaLevel active_isa();

// FLASHPP_CPU_ISA=amx_emulated (a test level, in builds with FLASHPP_CPU_AMX_EMULATION): the
// AMX bf16 engines run on emulated tiles (src/cpu/amx_tiles.hpp), everything else at avx2;
// active_isa() then returns avx2.
bool amx_emulation_requested();

// A one-line description of the CPU features that matter here, e.g.
// "avx2 fma f16c avx512f avx512bw avx512vl avx512dq avx512_bf16 amx_tile amx_bf16 (amx permitted)".
const char* cpu_feature_summary();

}  // namespace flashpp::cpu
