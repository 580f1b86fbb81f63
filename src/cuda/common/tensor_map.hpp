// Host side of the bulk copy engine (tma.cuh): tensor maps for the [B, N, H, D] views the kernels
// read, made through the driver's cuTensorMapEncodeTiled (reached with
// cudaGetDriverEntryPointByVersion, so the library needs no link against libcuda).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "flashpp/flashpp.hpp"

namespace flashpp::cuda {

// A map of a [B, N, H, D] view (element strides; D contiguous) of 16-bit or e4m3 elements whose
// box is `box_rows` rows x 128 bytes (64 16-bit or 128 e4m3 columns) of one (batch, head),
// 128-byte swizzled; or, with box_bytes = 64, rows of 64 bytes with the 64-byte swizzle (the FP8
// forward's 64-key Vt panel of 192- and 64-key tiles). Coordinates:
// (column, row, head, batch). Elements outside [0, D) x [0, N) read as zero. Returns false when
// the driver has no tensor maps or rejects the view (the caller then keeps its cp.async path).
bool make_row_tile_map(CUtensorMap* map, const void* data, DType dtype, std::int64_t batch,
                       std::int64_t rows, std::int64_t heads, std::int64_t head_dim,
                       std::int64_t batch_stride, std::int64_t row_stride,
                       std::int64_t head_stride, int box_rows, int box_bytes = 128);

// make_row_tile_map's maps are remembered per request (address, layout, box) and copied out on
// a repeat: encoding costs host time on every launch otherwise. encode_row_tile_map always asks
// the driver (the host-time probe compares the two).
bool encode_row_tile_map(CUtensorMap* map, const void* data, DType dtype, std::int64_t batch,
                         std::int64_t rows, std::int64_t heads, std::int64_t head_dim,
                         std::int64_t batch_stride, std::int64_t row_stride,
                         std::int64_t head_stride, int box_rows, int box_bytes = 128);

// True when `device` has the bulk copy engine (compute capability 9.0 or later).
bool device_has_tma(int device);

}  // namespace flashpp::cuda
