// Host-memory reduction kernels, one per (dtype, op), written so the compiler vectorizes them.
// f16 and bf16 are converted to f32, combined, and rounded once per call (round to nearest even).
#pragma once
#include <cstddef>

#include <chorus/types.hpp>

namespace chorus {

// dst[i] = a[i] (op) b[i] for i < count. dst may alias a or b. avg combines as sum.
// Precondition: reduce_op_valid(t, op).
void reduce2(DType t, ReduceOp op, void* dst, const void* a, const void* b, std::size_t count);

// dst[i] = srcs[0][i] (op) srcs[1][i] (op) ... (op) srcs[nsrc-1][i], accumulating f16/bf16 in f32
// and rounding once. dst may alias srcs[0]. nsrc >= 1. avg combines as sum.
void reduce_n(DType t, ReduceOp op, void* dst, const void* const* srcs, std::size_t nsrc,
              std::size_t count);

// dst[i] = dst[i] / divisor, for avg: floats divide, integers divide truncating toward zero.
void divide_by(DType t, void* dst, std::size_t count, std::size_t divisor);

// Scalar conversions used by kernels, tests and the benchmark's reference.
float f16_to_f32(unsigned short h);
unsigned short f32_to_f16(float f);
float bf16_to_f32(unsigned short h);
unsigned short f32_to_bf16(float f);

} // namespace chorus
