#include <chorus/types.hpp>

namespace chorus {

namespace {
constexpr std::string_view dtype_names[] = {"f16", "bf16", "f32", "f64", "i8", "u8", "i32", "i64"};
constexpr std::size_t dtype_sizes[] = {2, 2, 4, 8, 1, 1, 4, 8};
constexpr std::string_view redop_names[] = {"sum", "prod", "min", "max", "avg", "band", "bor", "bxor"};
constexpr std::string_view opkind_names[] = {"all_reduce", "reduce",  "broadcast", "all_gather",
                                             "reduce_scatter", "all_to_all", "gather", "scatter",
                                             "barrier", "send", "recv"};

template <class E, std::size_t N>
std::optional<E> parse_name(const std::string_view (&names)[N], std::string_view s) {
  for (std::size_t i = 0; i < N; ++i)
    if (names[i] == s) return static_cast<E>(i);
  return std::nullopt;
}
} // namespace

std::size_t dtype_size(DType t) { return dtype_sizes[static_cast<int>(t)]; }

bool is_floating(DType t) {
  return t == DType::f16 || t == DType::bf16 || t == DType::f32 || t == DType::f64;
}

bool holds_reduction(OpKind k, int rank, int root) {
  return k == OpKind::all_reduce || k == OpKind::reduce_scatter || (k == OpKind::reduce && rank == root);
}

bool reduce_op_valid(DType t, ReduceOp op) {
  bool bitwise = op == ReduceOp::band || op == ReduceOp::bor || op == ReduceOp::bxor;
  return !(bitwise && is_floating(t));
}

std::string_view to_string(DType t) { return dtype_names[static_cast<int>(t)]; }
std::string_view to_string(ReduceOp op) { return redop_names[static_cast<int>(op)]; }
std::string_view to_string(OpKind k) { return opkind_names[static_cast<int>(k)]; }
std::optional<DType> parse_dtype(std::string_view s) { return parse_name<DType>(dtype_names, s); }
std::optional<ReduceOp> parse_reduce_op(std::string_view s) {
  return parse_name<ReduceOp>(redop_names, s);
}
std::optional<OpKind> parse_op_kind(std::string_view s) {
  return parse_name<OpKind>(opkind_names, s);
}

} // namespace chorus
