// Run-time switches for A/B runs: an environment variable read at every call.
#pragma once

#include <cstdlib>

namespace flashpp::cuda {

// An on/off switch in the environment: 1 / 0 when `name` is set to "1" / "0", else -1.
inline int env_switch(const char* name) {
  const char* env = std::getenv(name);
  const bool set = env != nullptr && (env[0] == '0' || env[0] == '1') && env[1] == '\0';
  return set ? env[0] - '0' : -1;
}

}  // namespace flashpp::cuda
