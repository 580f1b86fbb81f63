// FLASHPP_CPU_ISA selects the CPU kernel level the tests run (tests/CMakeLists.txt registers
// the oracle sweep once per level). On a machine without that level every test of the run is
// skipped, with the reason printed: never a silent pass, never a failure for missing hardware.
#include <cstdio>
#include <cstdlib>

#include <gtest/gtest.h>

#include "cpu/cpu_features.hpp"
#include "flashpp/flashpp.hpp"

namespace {

class CpuIsaGuard : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* requested = std::getenv("FLASHPP_CPU_ISA");
    if (requested == nullptr || *requested == '\0') return;
    try {
      const auto level = flashpp::cpu::active_isa();
      std::printf("FLASHPP_CPU_ISA=%s: running the %s kernels (cpu: %s)\n", requested,
                  flashpp::cpu::to_string(level), flashpp::cpu::cpu_feature_summary());
    } catch (const flashpp::Error& e) {
      std::printf("SKIPPED: %s\n", e.what());
      GTEST_SKIP() << e.what();
    }
  }
};

const auto* const registered = ::testing::AddGlobalTestEnvironment(new CpuIsaGuard);

}  // namespace
