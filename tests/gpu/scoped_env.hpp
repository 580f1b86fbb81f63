// An environment variable set for a scope of a GPU test, then restored (or unset where it was
// unset before), so that a variable the test binary was started with (tools/gpu_check.sh runs
// whole passes under FLASHPP_CUDA_FAMILY=sm80 or FLASHPP_SM90_BACKWARD=0) still holds for the
// tests that follow.
#pragma once

#include <cstdlib>
#include <string>

namespace flashpp::gpu_test {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) {
      had_ = true;
      old_ = old;
    }
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

}  // namespace flashpp::gpu_test
