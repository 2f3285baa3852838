// Element types, reduce ops and op kinds shared by every layer.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace chorus {

// A peer: its rank in a handle's group (roots, send/recv partners), or a global peer id.
using PeerId = uint32_t;

enum class DType : uint8_t { f16, bf16, f32, f64, i8, u8, i32, i64 };
inline constexpr DType all_dtypes[] = {DType::f16, DType::bf16, DType::f32, DType::f64,
                                       DType::i8,  DType::u8,   DType::i32, DType::i64};

// avg is sum followed by a division by the number of peers that contributed.
enum class ReduceOp : uint8_t { sum, prod, min, max, avg, band, bor, bxor };
inline constexpr ReduceOp all_reduce_ops[] = {ReduceOp::sum, ReduceOp::prod, ReduceOp::min,
                                              ReduceOp::max, ReduceOp::avg,  ReduceOp::band,
                                              ReduceOp::bor, ReduceOp::bxor};

enum class OpKind : uint8_t {
  all_reduce, reduce, broadcast, all_gather, reduce_scatter,
  all_to_all, gather, scatter, barrier, send, recv
};

std::size_t dtype_size(DType t);
bool is_floating(DType t);
// Bitwise ops are defined only on integer types.
bool reduce_op_valid(DType t, ReduceOp op);
// Whether `rank` ends an op of this kind holding a reduction (what avg divides afterwards).
bool holds_reduction(OpKind k, int rank, int root);

std::string_view to_string(DType t);
std::string_view to_string(ReduceOp op);
std::string_view to_string(OpKind k);
std::optional<DType> parse_dtype(std::string_view s);
std::optional<ReduceOp> parse_reduce_op(std::string_view s);
std::optional<OpKind> parse_op_kind(std::string_view s);

} // namespace chorus
