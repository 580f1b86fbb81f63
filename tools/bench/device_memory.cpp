#include "device_memory.hpp"

#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <utility>

#ifdef FLASHPP_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace flashpp::bench {
namespace {

#ifdef FLASHPP_WITH_CUDA
void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
  }
}
#else
[[noreturn]] void no_cuda(const char* what) {
  throw std::runtime_error(std::string(what) +
                           ": flashpp-bench was built without CUDA (FLASHPP_WITH_CUDA)");
}
#endif

}  // namespace

Buffer::Buffer(Device device, std::size_t bytes) : bytes_(bytes), device_(device) {
  if (bytes == 0) return;
  if (device.type == DeviceType::cpu) {
    // 64-byte alignment: a cache line, and what the widest vector loads like.
    data_ = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (data_ == nullptr) throw std::bad_alloc();
    return;
  }
#ifdef FLASHPP_WITH_CUDA
  cuda_set_device(device.index);
  check_cuda(cudaMalloc(&data_, bytes), "cudaMalloc");
#else
  no_cuda("cudaMalloc");
#endif
}

Buffer::~Buffer() { release(); }

Buffer::Buffer(Buffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      device_(other.device_) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    device_ = other.device_;
  }
  return *this;
}

void Buffer::release() noexcept {
  if (data_ == nullptr) return;
  if (device_.type == DeviceType::cpu) {
    std::free(data_);
  } else {
#ifdef FLASHPP_WITH_CUDA
    cudaFree(data_);
#endif
  }
  data_ = nullptr;
}

void Buffer::upload(const void* host) {
  if (bytes_ == 0) return;
  if (device_.type == DeviceType::cpu) {
    std::memcpy(data_, host, bytes_);
    return;
  }
#ifdef FLASHPP_WITH_CUDA
  check_cuda(cudaMemcpy(data_, host, bytes_, cudaMemcpyHostToDevice), "cudaMemcpy to device");
#else
  no_cuda("cudaMemcpy");
#endif
}

std::vector<std::byte> Buffer::download() const {
  std::vector<std::byte> host(bytes_);
  if (bytes_ == 0) return host;
  if (device_.type == DeviceType::cpu) {
    std::memcpy(host.data(), data_, bytes_);
    return host;
  }
#ifdef FLASHPP_WITH_CUDA
  check_cuda(cudaMemcpy(host.data(), data_, bytes_, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
#else
  no_cuda("cudaMemcpy");
#endif
  return host;
}

void Buffer::fill_zero() {
  if (bytes_ == 0) return;
  if (device_.type == DeviceType::cpu) {
    std::memset(data_, 0, bytes_);
    return;
  }
#ifdef FLASHPP_WITH_CUDA
  check_cuda(cudaMemset(data_, 0, bytes_), "cudaMemset");
#else
  no_cuda("cudaMemset");
#endif
}

#ifdef FLASHPP_WITH_CUDA
void cuda_set_device(int index) { check_cuda(cudaSetDevice(index), "cudaSetDevice"); }
void cuda_synchronize() { check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }
std::size_t cuda_free_bytes() {
  std::size_t free_bytes = 0, total = 0;
  check_cuda(cudaMemGetInfo(&free_bytes, &total), "cudaMemGetInfo");
  return free_bytes;
}
std::string cuda_device_name(int index) {
  cudaDeviceProp prop{};
  check_cuda(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties");
  return prop.name;
}

CudaEventTimer::CudaEventTimer() {
  cudaEvent_t a, b;
  check_cuda(cudaEventCreate(&a), "cudaEventCreate");
  check_cuda(cudaEventCreate(&b), "cudaEventCreate");
  start_ = a;
  stop_ = b;
}
CudaEventTimer::~CudaEventTimer() {
  cudaEventDestroy(static_cast<cudaEvent_t>(start_));
  cudaEventDestroy(static_cast<cudaEvent_t>(stop_));
}
void CudaEventTimer::start() {
  check_cuda(cudaEventRecord(static_cast<cudaEvent_t>(start_), nullptr), "cudaEventRecord");
}
void CudaEventTimer::stop() {
  check_cuda(cudaEventRecord(static_cast<cudaEvent_t>(stop_), nullptr), "cudaEventRecord");
}
double CudaEventTimer::milliseconds() {
  check_cuda(cudaEventSynchronize(static_cast<cudaEvent_t>(stop_)), "cudaEventSynchronize");
  float ms = 0;
  check_cuda(
      cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start_), static_cast<cudaEvent_t>(stop_)),
      "cudaEventElapsedTime");
  return ms;
}
#else
void cuda_set_device(int) { no_cuda("cudaSetDevice"); }
void cuda_synchronize() { no_cuda("cudaDeviceSynchronize"); }
std::size_t cuda_free_bytes() { no_cuda("cudaMemGetInfo"); }
std::string cuda_device_name(int) { no_cuda("cudaGetDeviceProperties"); }
CudaEventTimer::CudaEventTimer() { no_cuda("cudaEventCreate"); }
CudaEventTimer::~CudaEventTimer() = default;
void CudaEventTimer::start() { no_cuda("cudaEventRecord"); }
void CudaEventTimer::stop() { no_cuda("cudaEventRecord"); }
double CudaEventTimer::milliseconds() { no_cuda("cudaEventElapsedTime"); }
#endif

}  // namespace flashpp::bench
