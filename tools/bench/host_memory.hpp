// The process's resident memory, to measure what a CPU call allocates beyond its inputs and
// outputs: reset the peak, run the calls, read the peak.
#pragma once

#include <cstdint>

namespace flashpp::bench {

// Resets the kernel's peak-RSS mark (VmHWM) to the current RSS (Linux: "5" to
// /proc/self/clear_refs). False where that is not possible: peaks are then unavailable.
bool reset_peak_rss();

// VmRSS and VmHWM of /proc/self/status in bytes; -1 when unavailable.
std::int64_t current_rss_bytes();
std::int64_t peak_rss_bytes();

}  // namespace flashpp::bench
