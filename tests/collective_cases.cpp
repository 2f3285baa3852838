// The data, references and case lists of the end-to-end collective tests (collective_cases.hpp).
#include "collective_cases.hpp"

#include <algorithm>
#include <cstring>

namespace chorus::testing {

void fill_bytes(uint64_t seed, uint64_t stream, void* dst, std::size_t nbytes) {
  auto* d = static_cast<unsigned char*>(dst);
  for (std::size_t w = 0; w * 8 < nbytes; ++w) {
    const uint64_t h = h3(seed, stream, w);
    std::memcpy(d + w * 8, &h, std::min<std::size_t>(8, nbytes - w * 8));
  }
}
Bytes bytes_of(uint64_t seed, uint64_t stream, std::size_t nbytes) {
  Bytes b(nbytes);
  fill_bytes(seed, stream, b.data(), nbytes);
  return b;
}

const char* kind_name(K k) {
  static const char* names[] = {"all_reduce(in place)", "all_reduce(out of place)", "reduce(in place)",
                                "reduce(out of place)", "reduce_scatter", "broadcast(root)",
                                "broadcast(data)", "all_gather", "gather", "scatter(root)",
                                "scatter(data)", "all_to_all", "barrier", "send/recv",
                                "all_gather(in = view of my output block)",
                                "gather(root's in = view of its output block)",
                                "reduce_scatter(out = view of my input block)",
                                "scatter(root's out = view of its input block)",
                                "all_reduce(in, in)", "reduce(in, in)"};
  return names[static_cast<int>(k)];
}

namespace {

// Exactly representable inputs for the reductions, chosen so that every partial result of any
// reduction order is exact as well (f16/bf16 included), and integers exercise full-width values
// (wrapping for sum/prod, signed vs unsigned compare for min/max).
double fvalue(const Case& c, uint32_t p, std::size_t e) {
  const uint64_t h = h3(c.seed, p, e);
  switch (c.op) {
    case ReduceOp::sum: return static_cast<double>(static_cast<int>(h % 33) - 16) / 4;  // |sum| <= 32, step 1/4
    case ReduceOp::avg: return static_cast<double>(static_cast<int>(h % 17) - 8);
    case ReduceOp::prod: {
      static const double v[] = {1, 2, -1, -2, 0.5};  // |prod| in [2^-8, 2^8]
      return v[h % 5];
    }
    default: return static_cast<double>(static_cast<int>(h % 201) - 100) / 8;  // min/max
  }
}
int64_t ivalue(const Case& c, uint32_t p, std::size_t e) {
  const uint64_t h = h3(c.seed, p, e);
  switch (c.op) {
    case ReduceOp::avg:  // small, so the sum cannot wrap; negative for signed types
      return ref::is_signed_int(c.dt) ? static_cast<int64_t>(h % 17) - 8 : static_cast<int64_t>(h % 17);
    case ReduceOp::prod: return ref::wrap(c.dt, h | 1);  // odd: the product never degenerates to 0
    case ReduceOp::band: return ref::wrap(c.dt, h | mix(h));  // mostly ones
    case ReduceOp::bor: return ref::wrap(c.dt, h & mix(h));   // mostly zeros
    default: return ref::wrap(c.dt, h);                        // sum, min, max, bxor
  }
}

void put_value(const Case& c, uint32_t p, void* buf, std::size_t e, std::size_t at) {
  if (ref::floating(c.dt)) ref::set_f(c.dt, buf, at, fvalue(c, p, e));
  else ref::set_i(c.dt, buf, at, ivalue(c, p, e));
}


} // namespace

Bytes reduce_input(const Case& c, uint32_t p, std::size_t numel) {
  Bytes b(numel * ref::esize(c.dt));
  for (std::size_t e = 0; e < numel; ++e) put_value(c, p, b.data(), e, e);
  return b;
}

ref::Expected expect_reduction(const Case& c, uint32_t n, std::size_t first, std::size_t cnt) {
  ref::Expected ex;
  ex.dtype = c.dt;
  ex.bytes.resize(cnt * ref::esize(c.dt));
  const bool fl = ref::floating(c.dt);
  std::vector<double> fv(n);
  std::vector<int64_t> iv(n);
  if (fl && c.op == ReduceOp::avg) {
    ex.value.resize(cnt);
    ex.tol = c.dt == DType::f64 ? 1e-12 : c.dt == DType::f32 ? 1e-6 : 1e-2;
  }
  for (std::size_t i = 0; i < cnt; ++i) {
    if (fl) {
      for (uint32_t q = 0; q < n; ++q) fv[q] = fvalue(c, q, first + i);
      const double r = ref::reduce_f(c.op, fv.data(), n);
      ref::set_f(c.dt, ex.bytes.data(), i, r);
      if (!ex.value.empty()) ex.value[i] = r;
    } else {
      for (uint32_t q = 0; q < n; ++q) iv[q] = ivalue(c, q, first + i);
      ref::set_i(c.dt, ex.bytes.data(), i, ref::reduce_i(c.dt, c.op, iv.data(), n));
    }
  }
  return ex;
}

ref::Expected exact(DType dt, Bytes b) {
  ref::Expected ex;
  ex.dtype = dt;
  ex.bytes = std::move(b);
  return ex;
}

void number(std::vector<Case>& cases, uint32_t n) {
  for (std::size_t i = 0; i < cases.size(); ++i) {
    cases[i].index = i;
    cases[i].seed = mix(i * 7919 + n * 104729 + static_cast<uint64_t>(cases[i].kind));
    cases[i].root = static_cast<uint32_t>(mix(i + 77) % n);
    cases[i].variant = static_cast<int>(i % 6);
  }
}

std::vector<Case> matrix_cases(uint32_t n) {
  std::vector<Case> cases;
  for (std::size_t count : {0, 1, 7, 1000, 1003}) {
    for (DType dt : all_dtypes) {
      for (ReduceOp op : all_reduce_ops) {
        if (!reduce_op_valid(dt, op)) continue;
        for (K k : kReduceKinds) cases.push_back({k, dt, op, count});
      }
      for (K k : kMoveKinds) cases.push_back({k, dt, ReduceOp::sum, count});
    }
    cases.push_back({K::barrier, DType::f32, ReduceOp::sum, 0});
    cases.push_back({K::send_recv, count == 1003 ? DType::f64 : DType::i8, ReduceOp::sum, count});
  }
  number(cases, n);
  return cases;
}

std::string strategy_id(const char* s) {
  std::string r;
  for (const char* q = s; *q; ++q) r += (*q == ':') ? '_' : *q;
  return r;
}

} // namespace chorus::testing
