#include "cuda/device_plan.hpp"

#include <cstdint>
#include <map>

namespace chorus::gpu {

namespace {

const std::byte* at(const void* p, std::size_t off) { return static_cast<const std::byte*>(p) + off; }
std::byte* at(void* p, std::size_t off) { return static_cast<std::byte*>(p) + off; }

bool overlap(const void* a, std::size_t na, const void* b, std::size_t nb) {
  auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return na && nb && x < y + nb && y < x + na;
}

class Builder {
 public:
  Builder(const DeviceCollective& c, const ScratchFn& scratch) : c_(c), scratch_(scratch) {
    esize_ = dtype_size(c.dtype);
    block_ = c.count * esize_;
    n_ = static_cast<int>(c.peers.size());
    plan_.lead = lead_device(c);
  }

  DevicePlan build() {
    switch (c_.kind) {
      case OpKind::all_reduce: all_reduce(); break;
      case OpKind::reduce: reduce(); break;
      case OpKind::reduce_scatter: reduce_scatter(); break;
      case OpKind::broadcast:
      case OpKind::send:
      case OpKind::recv:
        for (int i = 0; i < n_; ++i) copy(out(i), dev(i), in(c_.root), dev(c_.root), block_);
        break;
      case OpKind::all_gather:
      case OpKind::gather: {
        // In place is my input already sitting in my block of the output; any other overlap of an
        // input with an output would read a block already replaced: such inputs are staged.
        // Only outputs the op writes count: a gather's non-roots pass their input as the output.
        Inputs ins = inputs(block_, [&](int j, int i) {
          return (c_.kind == OpKind::all_gather || i == c_.root) && overlap(in(j), block_, out(i), n_ * block_) &&
                 !(i == j && in(j) == at(out(i), j * block_));
        });
        for (int i = 0; i < n_; ++i)
          if (c_.kind == OpKind::all_gather || i == c_.root)
            for (int j = 0; j < n_; ++j) copy(at(out(i), j * block_), dev(i), ins.ptr[j], ins.device[j], block_);
        break;
      }
      case OpKind::scatter: {
        // In place is my output being my own block of the root's input.
        Inputs ins = inputs(n_ * block_, [&](int j, int i) {
          return j == c_.root && overlap(in(j), n_ * block_, out(i), block_) && !(i == j && out(i) == at(in(j), i * block_));
        });
        for (int i = 0; i < n_; ++i)
          copy(out(i), dev(i), at(ins.ptr[c_.root], i * block_), ins.device[c_.root], block_);
        break;
      }
      case OpKind::all_to_all: all_to_all(); break;
      case OpKind::barrier: break;
    }
    return std::move(plan_);
  }

 private:
  int dev(int r) const { return c_.peers[r].device; }
  const void* in(int r) const { return c_.peers[r].in; }
  void* out(int r) const { return c_.peers[r].out; }
  std::size_t divisor() const { return c_.redop == ReduceOp::avg ? static_cast<std::size_t>(n_) : 1; }

  void copy(void* dst, int dd, const void* src, int sd, std::size_t bytes) {
    if (bytes == 0 || dst == src || dst == nullptr) return;
    DeviceStep s{DeviceStep::Kind::copy};
    s.copy = {dst, dd, src, sd, bytes};
    plan_.steps.push_back(s);
  }
  // `bytes` at src (on device sd) as seen from the lead device: itself, or a copy in scratch
  // (`reuse` >= 0: the same scratch every time for that key).
  const void* on_lead(const void* src, int sd, std::size_t bytes, int reuse = -1) {
    if (sd == plan_.lead) return src;
    void* t = reuse >= 0 && reused_.count(reuse) ? reused_[reuse] : scratch_(plan_.lead, bytes);
    if (reuse >= 0) reused_[reuse] = t;
    copy(t, plan_.lead, src, sd, bytes);
    return t;
  }
  // Reduces `srcs` into every output in `outs` (rank, address), via scratch for outputs elsewhere.
  void reduce_into(std::vector<const void*> srcs, const std::vector<std::pair<int, void*>>& outs) {
    DeviceReduce r{plan_.lead, {}, std::move(srcs), c_.count, divisor()};
    std::vector<std::pair<int, void*>> remote;
    for (auto& [rank, p] : outs) {
      if (dev(rank) == plan_.lead) r.dsts.push_back(p);
      else remote.push_back({rank, p});
    }
    if (r.dsts.empty() && !remote.empty()) r.dsts.push_back(scratch_(plan_.lead, block_));
    if (r.dsts.empty()) return;
    void* result = r.dsts.front();
    DeviceStep s{DeviceStep::Kind::reduce};
    s.reduce = std::move(r);
    plan_.steps.push_back(std::move(s));
    for (auto& [rank, p] : remote) copy(p, dev(rank), result, plan_.lead, block_);
  }

  // Every rank's whole input (n blocks), staged in scratch on the lead device where
  // clobbers(j, i) says output i overlaps input j in a way the op cannot tolerate.
  struct Inputs {
    std::vector<const void*> ptr;
    std::vector<int> device;
  };
  template <class Clobbers>
  Inputs inputs(std::size_t bytes, Clobbers clobbers) {
    Inputs r{std::vector<const void*>(n_), std::vector<int>(n_)};
    for (int j = 0; j < n_; ++j) {
      r.ptr[j] = in(j);
      r.device[j] = dev(j);
      if (!in(j)) continue;
      for (int i = 0; i < n_; ++i)
        if (out(i) && clobbers(j, i)) {
          void* t = scratch_(plan_.lead, bytes);
          copy(t, plan_.lead, in(j), dev(j), bytes);
          r.ptr[j] = t;
          r.device[j] = plan_.lead;
          break;
        }
    }
    return r;
  }

  void all_reduce() {
    std::vector<const void*> srcs;
    std::vector<std::pair<int, void*>> outs;
    for (int j = 0; j < n_; ++j) srcs.push_back(on_lead(in(j), dev(j), block_));
    for (int i = 0; i < n_; ++i) outs.push_back({i, out(i)});
    reduce_into(std::move(srcs), outs);
  }
  void reduce() {
    std::vector<const void*> srcs;
    for (int j = 0; j < n_; ++j) srcs.push_back(on_lead(in(j), dev(j), block_));
    reduce_into(std::move(srcs), {{c_.root, out(c_.root)}});
  }
  void reduce_scatter() {
    // Block i of every input reduces into peer i's output. Outputs may alias an input (in place on
    // the input's own block): then that block must be read by every reduction before it is
    // written, so inputs that overlap some output are staged first.
    Inputs ins = inputs(n_ * block_, [&](int j, int i) {
      return overlap(in(j), n_ * block_, out(i), block_) && !(j == i && out(i) == at(in(j), i * block_));
    });
    // Every input and output on the lead: one pass for every block (in place too: block i's
    // output is only block i of its own input, which no other block reads).
    bool one_pass = true;
    for (int j = 0; j < n_; ++j)
      one_pass = one_pass && ins.ptr[j] && ins.device[j] == plan_.lead && out(j) && dev(j) == plan_.lead;
    if (one_pass) {
      DeviceReduce r{plan_.lead, {}, ins.ptr, c_.count, divisor()};
      for (int i = 0; i < n_; ++i) r.dsts.push_back(out(i));
      r.block_stride = block_;
      DeviceStep s{DeviceStep::Kind::reduce};
      s.reduce = std::move(r);
      plan_.steps.push_back(std::move(s));
      return;
    }
    for (int i = 0; i < n_; ++i) {
      std::vector<const void*> srcs;
      // Block i of an input on another GPU comes over into scratch slot j, reused for every block
      // (the lead's stream runs block i's reduction before block i+1's copy overwrites it).
      for (int j = 0; j < n_; ++j)
        srcs.push_back(on_lead(at(ins.ptr[j], i * block_), ins.device[j], block_, j));
      reduce_into(std::move(srcs), {{i, out(i)}});
    }
  }
  void all_to_all() {
    // In place (or any overlap of an input with an output) would read blocks already replaced:
    // such inputs are staged in scratch first.
    Inputs ins = inputs(n_ * block_, [&](int j, int i) { return overlap(in(j), n_ * block_, out(i), n_ * block_); });
    for (int i = 0; i < n_; ++i)
      for (int j = 0; j < n_; ++j)
        copy(at(out(i), j * block_), dev(i), at(ins.ptr[j], i * block_), ins.device[j], block_);
  }

  const DeviceCollective& c_;
  const ScratchFn& scratch_;
  std::size_t esize_ = 1, block_ = 0;
  int n_ = 0;
  DevicePlan plan_;
  std::map<int, void*> reused_;
};

} // namespace

int lead_device(const DeviceCollective& c) {
  const bool rooted_op = c.kind == OpKind::reduce || c.kind == OpKind::broadcast || c.kind == OpKind::gather ||
                         c.kind == OpKind::scatter || c.kind == OpKind::send || c.kind == OpKind::recv;
  if (c.peers.empty()) return 0;
  return c.peers[rooted_op && c.root >= 0 && c.root < static_cast<int>(c.peers.size()) ? c.root : 0].device;
}

DevicePlan plan_collective(const DeviceCollective& c, const ScratchFn& scratch) {
  DevicePlan plan = Builder(c, scratch).build();
  plan.steps = batch_copies(std::move(plan.steps), plan.lead);
  return plan;
}

std::vector<DeviceStep> batch_copies(std::vector<DeviceStep> steps, int device) {
  std::vector<DeviceStep> out;
  out.reserve(steps.size());
  std::vector<DeviceCopy> run;
  auto flush = [&] {
    if (run.size() == 1) {
      DeviceStep s{DeviceStep::Kind::copy};
      s.copy = run[0];
      out.push_back(std::move(s));
    } else if (!run.empty()) {
      DeviceStep s{DeviceStep::Kind::copies};
      s.copies = {device, std::move(run)};
      out.push_back(std::move(s));
    }
    run.clear();
  };
  // Order binds c to an earlier copy b where c reads what b writes, or writes what b reads or writes.
  auto bound = [&](const DeviceCopy& c) {
    for (const DeviceCopy& b : run)
      if (overlap(c.src, c.bytes, b.dst, b.bytes) || overlap(c.dst, c.bytes, b.src, b.bytes) ||
          overlap(c.dst, c.bytes, b.dst, b.bytes))
        return true;
    return false;
  };
  for (DeviceStep& s : steps) {
    const DeviceCopy& c = s.copy;
    const bool joins = s.kind == DeviceStep::Kind::copy && c.dst_device == device && c.src_device == device &&
                       c.bytes <= kBatchedCopyBytes;
    if (!joins) {
      flush();
      out.push_back(std::move(s));
      continue;
    }
    if (static_cast<int>(run.size()) == kMaxBatchedCopies || bound(c)) flush();
    run.push_back(c);
  }
  flush();
  return out;
}

std::size_t input_bytes(const DeviceCollective& c, int rank) {
  const std::size_t b = c.count * dtype_size(c.dtype), n = c.peers.size();
  switch (c.kind) {
    case OpKind::reduce_scatter:
    case OpKind::all_to_all: return n * b;
    case OpKind::scatter: return rank == c.root ? n * b : 0;
    case OpKind::broadcast:
    case OpKind::send:
    case OpKind::recv: return rank == c.root ? b : 0;
    case OpKind::barrier: return 0;
    default: return b;
  }
}

std::size_t output_bytes(const DeviceCollective& c, int rank) {
  const std::size_t b = c.count * dtype_size(c.dtype), n = c.peers.size();
  switch (c.kind) {
    case OpKind::all_gather:
    case OpKind::all_to_all: return n * b;
    case OpKind::gather: return rank == c.root ? n * b : 0;
    case OpKind::reduce: return rank == c.root ? b : 0;
    case OpKind::barrier: return 0;
    default: return b;
  }
}

} // namespace chorus::gpu
