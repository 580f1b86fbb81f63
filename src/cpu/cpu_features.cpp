// CPU feature detection for the kernel dispatch (compiled for the x86-64 baseline: it must run
// on every machine, including those it then rules out).
#include "cpu_features.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "flashpp/flashpp.hpp"

#if defined(__x86_64__)
#include <cpuid.h>
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace flashpp::cpu {
namespace {

struct Features {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512_bf16 = false;
  bool amx_tile = false, amx_bf16 = false;
  bool os_ymm = false, os_zmm = false, os_amx = false;  // XCR0 says the OS saves the state
  bool amx_permitted = false;                            // Linux granted XTILEDATA
  IsaLevel level = IsaLevel::generic;
  std::string summary;
};

#if defined(__x86_64__)
std::uint64_t read_xcr0() {
  std::uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (std::uint64_t(hi) << 32) | lo;
}
#endif

// Linux keeps the AMX tile data state off until a process asks (arch_prctl
// ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA); without it the first tile instruction faults.
bool request_amx_permission() {
#if defined(__linux__) && defined(__x86_64__)
  constexpr int kArchGetXcompPerm = 0x1022, kArchReqXcompPerm = 0x1023;
  constexpr unsigned long kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) return false;
  unsigned long bitmask = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &bitmask) != 0) return false;
  return (bitmask & (1ul << kXfeatureXtiledata)) != 0;
#else
  return false;
#endif
}

Features detect() {
  Features f;
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(1, 0, &a, &b, &c, &d)) {
    f.fma = (c >> 12) & 1;
    f.f16c = (c >> 29) & 1;
    const bool osxsave = (c >> 27) & 1;
    if (osxsave) {
      const std::uint64_t xcr0 = read_xcr0();
      f.os_ymm = (xcr0 & 0x6) == 0x6;           // SSE + AVX state
      f.os_zmm = (xcr0 & 0xE6) == 0xE6;         // + opmask, ZMM_Hi256, Hi16_ZMM
      f.os_amx = (xcr0 & 0x60000) == 0x60000;   // XTILECFG + XTILEDATA
    }
  }
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    f.avx2 = (b >> 5) & 1;
    f.avx512f = (b >> 16) & 1;
    f.avx512dq = (b >> 17) & 1;
    f.avx512bw = (b >> 30) & 1;
    f.avx512vl = (b >> 31) & 1;
    f.amx_bf16 = (d >> 22) & 1;
    f.amx_tile = (d >> 24) & 1;
  }
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avx512_bf16 = (a >> 5) & 1;
#endif
  const bool avx2 = f.os_ymm && f.avx2 && f.fma && f.f16c;
  const bool avx512 = avx2 && f.os_zmm && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq;
  const bool avx512bf16 = avx512 && f.avx512_bf16;
  const bool amx_hw = avx512bf16 && f.amx_tile && f.amx_bf16 && f.os_amx;
  if (amx_hw) f.amx_permitted = request_amx_permission();
  f.level = f.amx_permitted ? IsaLevel::amx
            : avx512bf16    ? IsaLevel::avx512bf16
            : avx512        ? IsaLevel::avx512
            : avx2          ? IsaLevel::avx2
                            : IsaLevel::generic;
  const std::pair<bool, const char*> named[] = {
      {f.avx2, "avx2"},         {f.fma, "fma"},           {f.f16c, "f16c"},
      {f.avx512f, "avx512f"},   {f.avx512bw, "avx512bw"}, {f.avx512vl, "avx512vl"},
      {f.avx512dq, "avx512dq"}, {f.avx512_bf16, "avx512_bf16"},
      {f.amx_tile, "amx_tile"}, {f.amx_bf16, "amx_bf16"}};
  for (const auto& [present, name] : named) {
    if (!present) continue;
    if (!f.summary.empty()) f.summary += ' ';
    f.summary += name;
  }
  if (f.summary.empty()) f.summary = "x86-64 baseline";
  if (f.amx_tile) f.summary += f.amx_permitted ? " (amx permitted)" : " (amx not permitted by the OS)";
  return f;
}

const Features& features() {
  static const Features f = detect();  // thread-safe, once per process
  return f;
}

}  // namespace

const char* to_string(IsaLevel level) {
  switch (level) {
    case IsaLevel::generic: return "generic";
    case IsaLevel::avx2: return "avx2";
    case IsaLevel::avx512: return "avx512";
    case IsaLevel::avx512bf16: return "avx512bf16";
    case IsaLevel::amx: return "amx";
  }
  return "?";
}

#ifndef FLASHPP_CPU_MAX_LEVEL
#define FLASHPP_CPU_MAX_LEVEL 4
#endif

// The CPU's level, capped at the highest level this build compiled.
IsaLevel supported_isa() {
  return std::min(features().level, static_cast<IsaLevel>(FLASHPP_CPU_MAX_LEVEL));
}

const char* cpu_feature_summary() { return features().summary.c_str(); }

bool amx_emulation_requested() {
  const char* env = std::getenv("FLASHPP_CPU_ISA");
  return env != nullptr && std::strcmp(env, "amx_emulated") == 0;
}

IsaLevel active_isa() {
  const IsaLevel best = supported_isa();
  const char* env = std::getenv("FLASHPP_CPU_ISA");
  if (env == nullptr || *env == '\0') return best;
  if (std::strcmp(env, "amx_emulated") == 0) {
    // The AMX engines on emulated tiles, built with AVX2 flags; the float32 kernels at avx2.
#if FLASHPP_CPU_AMX_EMULATION
    if (best < IsaLevel::avx2) {
      throw Error(ErrorCode::unsupported,
                  std::string("FLASHPP_CPU_ISA=amx_emulated: the emulation needs avx2; this CPU "
                              "supports up to '") + to_string(best) + "' (" +
                      cpu_feature_summary() + ")");
    }
    return IsaLevel::avx2;
#else
    throw Error(ErrorCode::unsupported,
                "FLASHPP_CPU_ISA=amx_emulated: this build has no AMX emulation "
                "(configured with -DFLASHPP_CPU_AMX_EMULATION=OFF)");
#endif
  }
  for (int i = 0; i <= static_cast<int>(IsaLevel::amx); ++i) {
    const auto level = static_cast<IsaLevel>(i);
    if (std::strcmp(env, to_string(level)) != 0) continue;
    if (level > best) {
      throw Error(ErrorCode::unsupported,
                  std::string("FLASHPP_CPU_ISA=") + env + ": this CPU supports up to '" +
                      to_string(best) + "' (" + cpu_feature_summary() + ")");
    }
    return level;
  }
  throw Error(ErrorCode::invalid_argument,
              std::string("FLASHPP_CPU_ISA: expected generic, avx2, avx512, avx512bf16, amx or "
                          "amx_emulated, got '") + env + "'");
}

}  // namespace flashpp::cpu
