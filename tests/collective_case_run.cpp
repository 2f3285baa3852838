// One case of the end-to-end collective tests from one peer's side, and a list of cases on every
// peer (collective_cases.hpp).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <thread>

#include "collective_cases.hpp"
#include "peer_harness.hpp"

namespace chorus::testing {
namespace {

struct Shared {
  explicit Shared(std::size_t ncases) : arrived(ncases) {}
  std::deque<std::atomic<int>> arrived;  // barrier cases: peers that got past the barrier's start
};

struct Ctx {
  Peer& peer;
  uint32_t p, n;
  const char* strategy;
  Reporter& rep;
  Shared& shared;
};

// Owned (Tensor::zeros) or borrowed (caller's memory) storage. Keep holds the borrowed memory
// and a handle to every buffer of the case: when the case is over, every buffer is scribbled
// over before it is freed, so a peer that still read another peer's memory after that peer's
// call had returned (a broken rendezvous, or two ops mixed up) would see wrong data.
struct Keep {
  std::vector<std::unique_ptr<Bytes>> mem;
  std::vector<Tensor> all;
  ~Keep() {
    for (Tensor& t : all)
      if (t.nbytes()) std::memset(t.data(), 0xEE, t.nbytes());
  }
};
Tensor alloc(DType dt, Shape shape, bool borrowed, Keep& keep) {
  if (!borrowed) return keep.all.emplace_back(Tensor::zeros(dt, std::move(shape)));
  std::size_t numel = 1;
  for (auto d : shape) numel *= static_cast<std::size_t>(d);
  keep.mem.push_back(std::make_unique<Bytes>(numel * ref::esize(dt) + 1));
  return keep.all.emplace_back(Tensor::borrow(keep.mem.back()->data(), dt, std::move(shape)));
}
Tensor alloc_with(DType dt, Shape shape, bool borrowed, Keep& keep, const Bytes& content) {
  Tensor t = alloc(dt, std::move(shape), borrowed, keep);
  if (!content.empty()) std::memcpy(t.data(), content.data(), std::min(content.size(), t.nbytes()));
  return t;
}

void check(Ctx& x, const Case& c, const char* what, const std::string& diff) {
  if (!diff.empty())
    x.rep.fail(c.describe(x.n, x.strategy) + ", peer " + std::to_string(x.p) + ": " + what + ": " + diff);
}
bool check_status(Ctx& x, const Case& c, const Status& st) {
  if (st) return true;
  x.rep.fail(c.describe(x.n, x.strategy) + ", peer " + std::to_string(x.p) + ": returned " + st.to_string());
  return false;
}
void check_buf(Ctx& x, const Case& c, const char* what, const Tensor& t, const ref::Expected& ex) {
  const std::size_t cnt = ex.bytes.size() / ref::esize(ex.dtype);
  if (t.numel() != cnt || t.dtype() != ex.dtype) {
    check(x, c, what, "tensor is " + t.describe() + ", expected " + std::string(to_string(ex.dtype)) +
                          " with " + std::to_string(cnt) + " elements");
    return;
  }
  check(x, c, what, ref::compare(t.data(), ex, cnt));
}

// The concatenation of every peer's `stream` bytes (all_gather / gather).
Bytes concat(uint64_t seed, uint32_t n, std::size_t nbytes) {
  Bytes all;
  for (uint32_t q = 0; q < n; ++q) {
    Bytes b = bytes_of(seed, q, nbytes);
    all.insert(all.end(), b.begin(), b.end());
  }
  return all;
}

// ---- one case, from one peer's side ------------------------------------------------------------

void run_case(Ctx& x, const Case& c) {
  Peer& peer = x.peer;
  const uint32_t p = x.p, n = x.n;
  const DType dt = c.dt;
  const std::size_t es = ref::esize(dt), cnt = c.count, cb = cnt * es;
  const auto ncnt = static_cast<int64_t>(n) * static_cast<int64_t>(cnt);
  const bool borrow = c.variant % 2 == 1;
  const bool is_root = p == c.root;
  Keep keep;
  const Bytes garbage = bytes_of(c.seed, kGarbage + p, n * cb + 8 * es);
  switch (c.kind) {
    case K::all_reduce_inplace: {
      Tensor t = alloc_with(dt, {static_cast<int64_t>(cnt)}, borrow, keep, reduce_input(c, p, cnt));
      if (check_status(x, c, peer.all_reduce(t, c.op))) check_buf(x, c, "result", t, expect_reduction(c, n, 0, cnt));
      break;
    }
    case K::all_reduce_out: {
      const Bytes input = reduce_input(c, p, cnt);
      Tensor in = alloc_with(dt, {static_cast<int64_t>(cnt)}, !borrow, keep, input);
      Tensor out = alloc_with(dt, {static_cast<int64_t>(cnt)}, borrow, keep, garbage);
      if (check_status(x, c, peer.all_reduce(in, out, c.op))) {
        check_buf(x, c, "result", out, expect_reduction(c, n, 0, cnt));
        check_buf(x, c, "input (must be unchanged)", in, exact(dt, input));
      }
      break;
    }
    case K::reduce_inplace: {
      const Bytes input = reduce_input(c, p, cnt);
      Tensor t = alloc_with(dt, {static_cast<int64_t>(cnt)}, borrow, keep, input);
      if (check_status(x, c, peer.reduce(t, c.op, c.root))) {
        if (is_root) check_buf(x, c, "result on the root", t, expect_reduction(c, n, 0, cnt));
        else check_buf(x, c, "non-root buffer (must be unchanged)", t, exact(dt, input));
      }
      break;
    }
    case K::reduce_out: {
      const Bytes input = reduce_input(c, p, cnt);
      Tensor in = alloc_with(dt, {static_cast<int64_t>(cnt)}, borrow, keep, input);
      Tensor out = alloc_with(dt, {static_cast<int64_t>(cnt)}, !borrow, keep, garbage);
      if (check_status(x, c, peer.reduce(in, out, c.op, c.root))) {
        if (is_root) check_buf(x, c, "result on the root", out, expect_reduction(c, n, 0, cnt));
        else check_buf(x, c, "non-root output (must be unchanged)", out,
                       exact(dt, Bytes(garbage.begin(), garbage.begin() + cb)));
        check_buf(x, c, "input (must be unchanged)", in, exact(dt, input));
      }
      break;
    }
    case K::reduce_scatter: {
      const Bytes input = reduce_input(c, p, n * cnt);
      Shape ins = c.variant % 3 == 2 ? Shape{n, static_cast<int64_t>(cnt)} : Shape{ncnt};
      Tensor in = alloc_with(dt, ins, borrow, keep, input);
      Tensor out = alloc_with(dt, {static_cast<int64_t>(cnt)}, !borrow, keep, garbage);
      if (check_status(x, c, peer.reduce_scatter(in, out, c.op))) {
        check_buf(x, c, "my block of the reduction", out, expect_reduction(c, n, p * cnt, cnt));
        check_buf(x, c, "input (must be unchanged)", in, exact(dt, input));
      }
      break;
    }
    case K::broadcast_root: {
      const Bytes data = bytes_of(c.seed, c.root, cb);
      Shape s = c.variant % 3 == 2 ? Shape{static_cast<int64_t>(cnt), 1} : Shape{static_cast<int64_t>(cnt)};
      Tensor buf = alloc_with(dt, s, borrow, keep, is_root ? data : garbage);
      if (check_status(x, c, peer.broadcast(buf, c.root)))
        check_buf(x, c, is_root ? "root's data (must be unchanged)" : "received data", buf, exact(dt, data));
      break;
    }
    case K::broadcast_data: {
      const Bytes data = bytes_of(c.seed, c.root, cb);
      Shape s = c.variant % 3 == 0 ? Shape{static_cast<int64_t>(cnt)}
              : c.variant % 3 == 1 ? Shape{1, static_cast<int64_t>(cnt)}
                                   : Shape{static_cast<int64_t>(cnt), 1, 1};
      std::optional<Tensor> mine;
      if (is_root) mine = alloc_with(dt, s, borrow, keep, data);
      Result<Tensor> r = peer.broadcast(mine);
      if (r.is_ok()) keep.all.push_back(*r);
      if (check_status(x, c, r.status())) {
        if (r->shape() != s)
          check(x, c, "shape", "got " + r->describe() + ", expected " + shape_string(s));
        check_buf(x, c, is_root ? "root's data (must be unchanged)" : "received data", *r, exact(dt, data));
      }
      break;
    }
    case K::all_gather: {
      const Bytes input = bytes_of(c.seed, p, cb);
      Tensor in = alloc_with(dt, {static_cast<int64_t>(cnt)}, borrow, keep, input);
      Shape os = c.variant % 3 == 2 ? Shape{n, static_cast<int64_t>(cnt)} : Shape{ncnt};
      Tensor out = alloc_with(dt, os, !borrow, keep, garbage);
      if (check_status(x, c, peer.all_gather(in, out))) {
        check_buf(x, c, "gathered blocks", out, exact(dt, concat(c.seed, n, cb)));
        check_buf(x, c, "input (must be unchanged)", in, exact(dt, input));
      }
      break;
    }
    case K::gather: {
      const Bytes input = bytes_of(c.seed, p, cb);
      Tensor in = alloc_with(dt, {static_cast<int64_t>(cnt)}, borrow, keep, input);
      // Non-roots pass an output that is ignored: none, or a buffer of an unrelated size.
      Tensor out;
      Bytes out_before;
      if (is_root) {
        out = alloc_with(dt, {ncnt}, !borrow, keep, garbage);
      } else if (c.variant % 3 != 0) {
        out = alloc_with(dt, {static_cast<int64_t>(cnt + 3)}, !borrow, keep, garbage);
        out_before.assign(garbage.begin(), garbage.begin() + (cnt + 3) * es);
      }
      if (check_status(x, c, peer.gather(in, out, c.root))) {
        if (is_root) check_buf(x, c, "gathered blocks on the root", out, exact(dt, concat(c.seed, n, cb)));
        else if (out.defined()) check_buf(x, c, "non-root output (must be unchanged)", out, exact(dt, out_before));
        check_buf(x, c, "input (must be unchanged)", in, exact(dt, input));
      }
      break;
    }
    case K::scatter_root: {
      const Bytes data = bytes_of(c.seed, c.root, n * cb);
      Tensor in;
      Bytes in_before;
      if (is_root) {
        in = alloc_with(dt, {ncnt}, borrow, keep, data);
        in_before = data;
      } else if (c.variant % 3 != 0) {  // ignored on non-roots: pass something of an unrelated size
        in = alloc_with(dt, {static_cast<int64_t>(cnt + 5)}, borrow, keep, garbage);
        in_before.assign(garbage.begin(), garbage.begin() + (cnt + 5) * es);
      }
      Tensor out = alloc_with(dt, {static_cast<int64_t>(cnt)}, !borrow, keep, garbage);
      if (check_status(x, c, peer.scatter(in, out, c.root))) {
        check_buf(x, c, "my block", out, exact(dt, Bytes(data.begin() + p * cb, data.begin() + (p + 1) * cb)));
        if (in.defined()) check_buf(x, c, "input (must be unchanged)", in, exact(dt, in_before));
      }
      break;
    }
    case K::scatter_data: {
      const Bytes data = bytes_of(c.seed, c.root, n * cb);
      const auto c64 = static_cast<int64_t>(cnt);
      Shape s = c.variant % 3 == 0 ? Shape{n, c64} : c.variant % 3 == 1 ? Shape{ncnt} : Shape{n, 1, c64};
      // A leading dimension of n is split off; otherwise the block is flat.
      Shape want = !s.empty() && s[0] == static_cast<int64_t>(n) ? Shape(s.begin() + 1, s.end()) : Shape{c64};
      std::optional<Tensor> mine;
      if (is_root) mine = alloc_with(dt, s, borrow, keep, data);
      Result<Tensor> r = peer.scatter(mine);
      if (r.is_ok()) keep.all.push_back(*r);
      if (check_status(x, c, r.status())) {
        if (r->shape() != want)
          check(x, c, "shape", "got " + r->describe() + ", expected " + shape_string(want));
        check_buf(x, c, "my block", *r, exact(dt, Bytes(data.begin() + p * cb, data.begin() + (p + 1) * cb)));
        if (is_root) check_buf(x, c, "root's data (must be unchanged)", *mine, exact(dt, data));
      }
      break;
    }
    case K::all_to_all: {
      const Bytes input = bytes_of(c.seed, p, n * cb);
      Tensor in = alloc_with(dt, {ncnt}, borrow, keep, input);
      Tensor out = alloc_with(dt, c.variant % 3 == 2 ? Shape{n, static_cast<int64_t>(cnt)} : Shape{ncnt},
                              !borrow, keep, garbage);
      if (check_status(x, c, peer.all_to_all(in, out))) {
        Bytes want;
        for (uint32_t i = 0; i < n; ++i) {
          Bytes b = bytes_of(c.seed, i, n * cb);
          want.insert(want.end(), b.begin() + p * cb, b.begin() + (p + 1) * cb);
        }
        check_buf(x, c, "received blocks", out, exact(dt, want));
        check_buf(x, c, "input (must be unchanged)", in, exact(dt, input));
      }
      break;
    }
    case K::barrier: {
      // One peer arrives late; nobody may leave the barrier before it has arrived. The delay is
      // the scenario, not an ordering: the check below holds whatever its length (0 included);
      // the delay only makes it likely that the others already wait.
      if (p == c.root) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      x.shared.arrived[c.index].fetch_add(1);
      if (check_status(x, c, peer.barrier())) {
        const int seen = x.shared.arrived[c.index].load();
        if (seen != static_cast<int>(n))
          check(x, c, "barrier", "left the barrier when only " + std::to_string(seen) + " of " +
                                     std::to_string(n) + " peers had arrived");
      }
      break;
    }
    case K::send_recv: {
      // Every ordered pair exchanges two messages with one tag (FIFO), tags vary per pair. Every
      // peer walks the same global list of pairs, so the blocking calls cannot deadlock.
      std::vector<std::pair<uint32_t, uint32_t>> pairs;
      for (uint32_t a = 0; a < n; ++a)
        for (uint32_t b = 0; b < n; ++b)
          if (a != b) pairs.push_back({a, b});
      std::rotate(pairs.begin(), pairs.begin() + (pairs.empty() ? 0 : c.seed % pairs.size()), pairs.end());
      for (auto [a, b] : pairs) {
        if (p != a && p != b) continue;
        const uint64_t stream = 2 * (a * n + b);
        const uint64_t tags[] = {0, 1, 7, 1ull << 40, ~0ull};
        const uint64_t tag = tags[(c.seed + a + 3 * b) % 5];
        const std::size_t mc = cnt + (a + b) % 3;  // message sizes differ between pairs
        const Bytes m0 = bytes_of(c.seed, stream, mc * es), m1 = bytes_of(c.seed, stream + 1, mc * es);
        const std::string who = " (" + std::to_string(a) + "->" + std::to_string(b) + " tag " + std::to_string(tag) + ")";
        if (p == a) {
          Tensor t0 = alloc_with(dt, {static_cast<int64_t>(mc)}, borrow, keep, m0);
          Tensor t1 = alloc_with(dt, {static_cast<int64_t>(mc)}, !borrow, keep, m1);
          if (check_status(x, c, peer.send(t0, b, tag)))
            check_buf(x, c, ("sent buffer (must be unchanged)" + who).c_str(), t0, exact(dt, m0));
          (void)check_status(x, c, peer.send(t1, b, tag));
        } else {
          Tensor r0 = alloc_with(dt, {static_cast<int64_t>(mc)}, !borrow, keep, garbage);
          Tensor r1 = alloc_with(dt, {static_cast<int64_t>(mc)}, borrow, keep, garbage);
          if (check_status(x, c, peer.recv(r0, a, tag)))
            check_buf(x, c, ("first message" + who).c_str(), r0, exact(dt, m0));
          if (check_status(x, c, peer.recv(r1, a, tag)))
            check_buf(x, c, ("second message" + who).c_str(), r1, exact(dt, m1));
        }
      }
      break;
    }
    case K::all_gather_view: {
      Tensor out = alloc_with(dt, {ncnt}, borrow, keep, garbage);
      fill_bytes(c.seed, p, static_cast<unsigned char*>(out.data()) + p * cb, cb);
      Tensor in = Tensor::borrow(static_cast<unsigned char*>(out.data()) + p * cb, dt, {static_cast<int64_t>(cnt)});
      if (check_status(x, c, peer.all_gather(in, out)))
        check_buf(x, c, "gathered blocks", out, exact(dt, concat(c.seed, n, cb)));
      break;
    }
    case K::gather_view: {
      Tensor out, in;
      if (is_root) {
        out = alloc_with(dt, {ncnt}, borrow, keep, garbage);
        fill_bytes(c.seed, p, static_cast<unsigned char*>(out.data()) + p * cb, cb);
        in = Tensor::borrow(static_cast<unsigned char*>(out.data()) + p * cb, dt, {static_cast<int64_t>(cnt)});
      } else {
        in = alloc_with(dt, {static_cast<int64_t>(cnt)}, borrow, keep, bytes_of(c.seed, p, cb));
      }
      if (check_status(x, c, peer.gather(in, out, c.root)) && is_root)
        check_buf(x, c, "gathered blocks on the root", out, exact(dt, concat(c.seed, n, cb)));
      break;
    }
    case K::reduce_scatter_view: {
      Tensor in = alloc_with(dt, {ncnt}, borrow, keep, reduce_input(c, p, n * cnt));
      Tensor out = Tensor::borrow(static_cast<unsigned char*>(in.data()) + p * cb, dt, {static_cast<int64_t>(cnt)});
      if (check_status(x, c, peer.reduce_scatter(in, out, c.op)))
        check_buf(x, c, "my block of the reduction", out, expect_reduction(c, n, p * cnt, cnt));
      break;
    }
    case K::scatter_view: {
      const Bytes data = bytes_of(c.seed, c.root, n * cb);
      Tensor in, out;
      if (is_root) {
        in = alloc_with(dt, {ncnt}, borrow, keep, data);
        out = Tensor::borrow(static_cast<unsigned char*>(in.data()) + p * cb, dt, {static_cast<int64_t>(cnt)});
      } else {
        out = alloc_with(dt, {static_cast<int64_t>(cnt)}, borrow, keep, garbage);
      }
      if (check_status(x, c, peer.scatter(in, out, c.root))) {
        check_buf(x, c, "my block", out, exact(dt, Bytes(data.begin() + p * cb, data.begin() + (p + 1) * cb)));
        if (is_root) check_buf(x, c, "root's data (must be unchanged)", in, exact(dt, data));
      }
      break;
    }
    case K::all_reduce_same: {
      Tensor t = alloc_with(dt, {static_cast<int64_t>(cnt)}, borrow, keep, reduce_input(c, p, cnt));
      if (check_status(x, c, peer.all_reduce(t, t, c.op))) check_buf(x, c, "result", t, expect_reduction(c, n, 0, cnt));
      break;
    }
    case K::reduce_same: {
      const Bytes input = reduce_input(c, p, cnt);
      Tensor t = alloc_with(dt, {static_cast<int64_t>(cnt)}, borrow, keep, input);
      if (check_status(x, c, peer.reduce(t, t, c.op, c.root))) {
        if (is_root) check_buf(x, c, "result on the root", t, expect_reduction(c, n, 0, cnt));
        else check_buf(x, c, "non-root buffer (must be unchanged)", t, exact(dt, input));
      }
      break;
    }
  }
}

} // namespace

void run_cases(Runtime& rt, uint32_t n, const char* strategy, const std::vector<Case>& cases,
               Reporter& rep, bool jitter) {
  Shared shared(cases.size());
  harness::run_peers(rt, harness::config_for(n, strategy), [&](Peer& peer) {
    Ctx x{peer, peer.id(), n, strategy, rep, shared};
    for (const Case& c : cases) {
      // Jitter is the scenario (peers drift apart between ops), not an ordering: every check
      // holds whatever the delays.
      if (jitter && h3(c.seed, x.p, 99) % 4 == 0)
        std::this_thread::sleep_for(std::chrono::microseconds(h3(c.seed, x.p, 98) % 300));
      run_case(x, c);
    }
  });
}

} // namespace chorus::testing
