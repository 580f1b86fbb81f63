// FLASHPP_HD marks functions shared verbatim by the CPU and CUDA backends.
#pragma once

#if defined(__CUDACC__)
#define FLASHPP_HD __host__ __device__ __forceinline__
#else
#define FLASHPP_HD inline
#endif
