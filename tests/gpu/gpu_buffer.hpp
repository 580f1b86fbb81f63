// Device memory for the GPU tests: an owning buffer, host<->device copies, and the "is there a
// GPU at all" check every GPU test starts with (GTEST_SKIP otherwise).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace flashpp::gpu_test {

inline bool gpu_present() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return count > 0;
}

#define FLASHPP_SKIP_WITHOUT_GPU()                                          \
  do {                                                                      \
    if (!::flashpp::gpu_test::gpu_present()) GTEST_SKIP() << "no CUDA GPU"; \
  } while (0)

#define FLASHPP_CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

// An owning cudaMalloc'ed buffer of `bytes` bytes.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
    if (bytes > 0 && cudaMalloc(&data_, bytes) != cudaSuccess) {
      data_ = nullptr;
      bytes_ = 0;
    }
  }
  ~DeviceBuffer() {
    if (data_ != nullptr) cudaFree(data_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), bytes_(o.bytes_) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  bool ok() const { return data_ != nullptr || bytes_ == 0; }

  template <typename T>
  void upload(const std::vector<T>& host) const {
    cudaMemcpy(data_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  template <typename T>
  std::vector<T> download(std::size_t count) const {
    std::vector<T> host(count);
    cudaMemcpy(host.data(), data_, count * sizeof(T), cudaMemcpyDeviceToHost);
    return host;
  }
  // Fills every byte with `byte` (0xFF makes fp16/bf16/f32 NaN: the poison before each run).
  void fill_bytes(int byte) const { cudaMemset(data_, byte, bytes_); }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace flashpp::gpu_test
