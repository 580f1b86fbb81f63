#include "host_memory.hpp"

#include <fstream>

#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <sstream>
#include <string>

namespace flashpp::bench {
namespace {

std::int64_t status_field_bytes(const char* field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  const std::string prefix = std::string(field) + ":";
  while (std::getline(status, line)) {
    if (line.rfind(prefix, 0) != 0) continue;
    std::istringstream in(line.substr(prefix.size()));
    std::int64_t kib = -1;
    in >> kib;  // "VmRSS:   12345 kB"
    return kib < 0 ? -1 : kib * 1024;
  }
  return -1;
}

}  // namespace

bool reset_peak_rss() {
#if defined(__GLIBC__)
  // Memory freed earlier (by previous cases) stays resident in malloc's free lists, and a call
  // reusing it would not grow the RSS: hand it back to the kernel first.
  malloc_trim(0);
#endif
  std::ofstream clear_refs("/proc/self/clear_refs");
  if (!clear_refs) return false;
  clear_refs << "5";
  clear_refs.flush();
  return bool(clear_refs);
}

std::int64_t current_rss_bytes() { return status_field_bytes("VmRSS"); }
std::int64_t peak_rss_bytes() { return status_field_bytes("VmHWM"); }

}  // namespace flashpp::bench
