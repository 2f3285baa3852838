// chorus-test-node: its output lines and the values every result is checked against.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <mutex>
#include <vector>

#include "multi_node_peer.hpp"

namespace chorus::test_node {

namespace {
std::mutex out_mu;
} // namespace

void say(const std::string& line) {
  std::lock_guard<std::mutex> lk(out_mu);
  std::cout << line << std::endl;
}

int64_t value(uint32_t rank, std::size_t i, ReduceOp op) {
  if (op == ReduceOp::prod) return 1 + static_cast<int64_t>((rank + i) % 2);
  return 1 + static_cast<int64_t>((rank * 7 + i * 3) % 5);
}

Tensor make_input(DType t, uint32_t rank, std::size_t count, ReduceOp op, std::size_t base) {
  Tensor x = Tensor::zeros(t, {static_cast<int64_t>(count)});
  for (std::size_t i = 0; i < count; ++i) {
    if (ref::floating(t)) ref::set_f(t, x.data(), i, static_cast<double>(value(rank, base + i, op)));
    else ref::set_i(t, x.data(), i, value(rank, base + i, op));
  }
  return x;
}

bool check_reduced(const Tensor& got, DType t, ReduceOp op, uint32_t n, std::size_t count, std::size_t base,
                   std::string& why) {
  // One buffer for every element's inputs: an allocation per element made the check of a 1 MiB
  // result take most of a second under ASan, and the peers' next op start that much later.
  std::vector<double> vf(n);
  std::vector<int64_t> vi(n);
  for (std::size_t i = 0; i < count; ++i) {
    if (ref::floating(t)) {
      for (uint32_t r = 0; r < n; ++r) vf[r] = static_cast<double>(value(r, base + i, op));
      double want = ref::reduce_f(op, vf.data(), n);
      double have = ref::get_f(t, got.data(), i);
      if (std::abs(have - want) > 1e-2 * std::max(1.0, std::abs(want))) {
        why = "element " + std::to_string(i) + ": " + std::to_string(have) + " != " + std::to_string(want);
        return false;
      }
    } else {
      for (uint32_t r = 0; r < n; ++r) vi[r] = ref::wrap(t, static_cast<uint64_t>(value(r, base + i, op)));
      int64_t want = ref::reduce_i(t, op, vi.data(), n);
      int64_t have = ref::get_i(t, got.data(), i);
      if (have != want) {
        why = "element " + std::to_string(i) + ": " + std::to_string(have) + " != " + std::to_string(want);
        return false;
      }
    }
  }
  return true;
}

void must(const Status& s) {
  if (!s) throw Fail{s};
}
void verify(bool ok, const std::string& what, const std::string& why) {
  if (!ok) throw Fail{Status(Errc::internal, "WRONG RESULT in " + what + ": " + why)};
}

} // namespace chorus::test_node
