#include "testkit/reference.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

#include "strategies/reduce_kernels.hpp"  // f32_to_f16 / f32_to_bf16 only: narrowing exact values

namespace chorus::ref {

namespace {

// Own decoders (not the library's): IEEE binary16 and bfloat16 to double.
double decode_f16(uint16_t h) {
  const int sign = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v;
  if (e == 0) v = std::ldexp(static_cast<double>(m), -24);
  else if (e == 31) v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else v = std::ldexp(static_cast<double>(m + 1024), e - 25);
  return sign ? -v : v;
}
double decode_bf16(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

template <class T>
T load(const void* base, std::size_t i) {
  T v;
  std::memcpy(&v, static_cast<const unsigned char*>(base) + i * sizeof(T), sizeof(T));
  return v;
}
template <class T>
void store(void* base, std::size_t i, T v) {
  std::memcpy(static_cast<unsigned char*>(base) + i * sizeof(T), &v, sizeof(T));
}

std::string hex_bytes(const unsigned char* p, std::size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s = "0x";
  for (std::size_t i = n; i-- > 0;) { s += d[p[i] >> 4]; s += d[p[i] & 15]; }  // little endian
  return s;
}

std::string show_elem(DType t, const void* base, std::size_t i) {
  const std::size_t es = esize(t);
  std::string raw = hex_bytes(static_cast<const unsigned char*>(base) + i * es, es);
  if (floating(t)) return std::to_string(get_f(t, base, i)) + " (" + raw + ")";
  return std::to_string(get_i(t, base, i)) + " (" + raw + ")";
}

} // namespace

// ---- element access --------------------------------------------------------------------------

double get_f(DType t, const void* base, std::size_t i) {
  switch (t) {
    case DType::f16: return decode_f16(load<uint16_t>(base, i));
    case DType::bf16: return decode_bf16(load<uint16_t>(base, i));
    case DType::f32: return load<float>(base, i);
    case DType::f64: return load<double>(base, i);
    default: return 0;
  }
}

void set_f(DType t, void* base, std::size_t i, double v) {
  switch (t) {
    case DType::f16: store(base, i, static_cast<uint16_t>(f32_to_f16(static_cast<float>(v)))); break;
    case DType::bf16: store(base, i, static_cast<uint16_t>(f32_to_bf16(static_cast<float>(v)))); break;
    case DType::f32: store(base, i, static_cast<float>(v)); break;
    case DType::f64: store(base, i, v); break;
    default: break;
  }
}

int64_t get_i(DType t, const void* base, std::size_t i) {
  switch (t) {
    case DType::i8: return load<int8_t>(base, i);
    case DType::u8: return load<uint8_t>(base, i);
    case DType::i32: return load<int32_t>(base, i);
    case DType::i64: return load<int64_t>(base, i);
    default: return 0;
  }
}

void set_i(DType t, void* base, std::size_t i, int64_t v) {
  switch (t) {
    case DType::i8: case DType::u8: store(base, i, static_cast<uint8_t>(v)); break;
    case DType::i32: store(base, i, static_cast<uint32_t>(v)); break;
    case DType::i64: store(base, i, v); break;
    default: break;
  }
}

int64_t wrap(DType t, uint64_t v) {
  switch (t) {
    case DType::i8: return static_cast<int8_t>(static_cast<uint8_t>(v));
    case DType::u8: return static_cast<uint8_t>(v);
    case DType::i32: return static_cast<int32_t>(static_cast<uint32_t>(v));
    case DType::i64: return static_cast<int64_t>(v);
    default: return 0;
  }
}

// ---- one element reduced over the peers -------------------------------------------------------

double reduce_f(ReduceOp op, const double* v, std::size_t n) {
  double r = v[0];
  for (std::size_t i = 1; i < n; ++i) {
    switch (op) {
      case ReduceOp::sum: case ReduceOp::avg: r += v[i]; break;
      case ReduceOp::prod: r *= v[i]; break;
      case ReduceOp::min: r = v[i] < r ? v[i] : r; break;
      case ReduceOp::max: r = v[i] > r ? v[i] : r; break;
      default: break;
    }
  }
  if (op == ReduceOp::avg) r /= static_cast<double>(n);
  return r;
}

int64_t reduce_i(DType t, ReduceOp op, const int64_t* v, std::size_t n) {
  if (op == ReduceOp::min || op == ReduceOp::max) {
    int64_t r = v[0];
    for (std::size_t i = 1; i < n; ++i) {
      if (op == ReduceOp::min && v[i] < r) r = v[i];
      if (op == ReduceOp::max && v[i] > r) r = v[i];
    }
    return r;
  }
  uint64_t r = static_cast<uint64_t>(v[0]);
  for (std::size_t i = 1; i < n; ++i) {
    const uint64_t x = static_cast<uint64_t>(v[i]);
    switch (op) {
      case ReduceOp::sum: case ReduceOp::avg: r += x; break;
      case ReduceOp::prod: r *= x; break;
      case ReduceOp::band: r &= x; break;
      case ReduceOp::bor: r |= x; break;
      case ReduceOp::bxor: r ^= x; break;
      default: break;
    }
  }
  if (op == ReduceOp::avg) return wrap(t, static_cast<uint64_t>(wrap(t, r) / static_cast<int64_t>(n)));  // '/' truncates toward 0
  return wrap(t, r);
}

// ---- whole buffers ----------------------------------------------------------------------------

std::string compare(const void* got, const Expected& e, std::size_t count) {
  const std::size_t es = esize(e.dtype);
  const auto* g = static_cast<const unsigned char*>(got);
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < count; ++i) {
    bool ok;
    if (e.tol > 0 && floating(e.dtype)) {
      const double x = get_f(e.dtype, got, i), want = e.value[i];
      const double sc = e.scale.empty() ? std::fabs(want) : e.scale[i];
      ok = std::fabs(x - want) <= e.tol * sc || x == want;
    } else {
      ok = std::memcmp(g + i * es, e.bytes.data() + i * es, es) == 0;
    }
    if (!ok && bad++ == 0) first = i;
  }
  if (bad == 0) return "";
  std::string msg = std::to_string(bad) + " of " + std::to_string(count) + " elements differ; first at " +
                    std::to_string(first) + ": got " + show_elem(e.dtype, got, first) + ", expected " +
                    show_elem(e.dtype, e.bytes.data(), first);
  if (e.tol > 0) msg += " (exact " + std::to_string(e.value[first]) + ", tol " + std::to_string(e.tol) + ")";
  return msg;
}

std::string compare_bytes(DType t, const void* got, const void* want, std::size_t count) {
  Expected e;
  e.dtype = t;
  e.bytes.assign(static_cast<const unsigned char*>(want),
                 static_cast<const unsigned char*>(want) + count * esize(t));
  return compare(got, e, count);
}

} // namespace chorus::ref
