// The GPU op plans (cuda/device_plan.hpp), run on host memory: every op kind, group size, device
// placement and in-place form must produce the reference result, and a plan must never let a
// kernel touch memory of a device other than the one it runs on. These run without a GPU; the GPU
// executor runs the very same plans with cudaMemcpy*Async and the reduction kernel.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <numeric>

#include "cuda/device_plan.hpp"
#include "host_plan_runner.hpp"
#include "strategies/reduce_kernels.hpp"

namespace {

using namespace chorus;
using namespace chorus::gpu;

// Which device every byte range belongs to, so steps can be checked against their claims.
struct Memory {
  struct Range { const std::byte* begin; std::size_t bytes; int device; };
  std::vector<Range> ranges;
  std::vector<std::unique_ptr<std::byte[]>> owned;
  std::byte* make(std::size_t bytes, int device) {
    owned.push_back(std::make_unique<std::byte[]>(bytes ? bytes : 1));
    ranges.push_back({owned.back().get(), bytes, device});
    return owned.back().get();
  }
  int device_of(const void* p, std::size_t bytes) const {
    auto b = static_cast<const std::byte*>(p);
    for (auto& r : ranges)
      if (b >= r.begin && b + bytes <= r.begin + r.bytes) return r.device;
    return -2;  // not inside any buffer
  }
};

// The plan on host memory; each step first checked against the devices its buffers claim.
void run_on_host(const DevicePlan& plan, const Memory& mem, DType t, ReduceOp op) {
  const std::size_t es = dtype_size(t);
  testing_support::run_plan_on_host(plan, t, op, [&](const DeviceStep& s) {
    if (s.kind == DeviceStep::Kind::copy) {
      const DeviceCopy& c = s.copy;
      EXPECT_EQ(mem.device_of(c.dst, c.bytes), c.dst_device) << "copy destination claims the wrong device";
      EXPECT_EQ(mem.device_of(c.src, c.bytes), c.src_device) << "copy source claims the wrong device";
      return;
    }
    if (s.kind == DeviceStep::Kind::copies) {
      EXPECT_EQ(s.copies.device, plan.lead);
      EXPECT_GE(s.copies.copies.size(), 2u);
      for (const DeviceCopy& c : s.copies.copies) {
        EXPECT_EQ(mem.device_of(c.dst, c.bytes), plan.lead) << "the copy kernel would write another GPU";
        EXPECT_EQ(mem.device_of(c.src, c.bytes), plan.lead) << "the copy kernel would read another GPU";
      }
      return;
    }
    const DeviceReduce& r = s.reduce;
    EXPECT_EQ(r.device, plan.lead);
    const std::size_t last = r.block_stride * (r.block_stride ? r.dsts.size() - 1 : 0);  // the last block read
    for (auto p : r.srcs) {
      EXPECT_EQ(mem.device_of(p, r.count * es), plan.lead) << "a kernel would read another GPU";
      EXPECT_EQ(mem.device_of(static_cast<const std::byte*>(p) + last, r.count * es), plan.lead)
          << "a kernel would read past a buffer or another GPU";
    }
    for (auto p : r.dsts) EXPECT_EQ(mem.device_of(p, r.count * es), plan.lead) << "a kernel would write another GPU";
  });
}

// separate buffers; the in-place layouts of NCCL/MPI; or input and output starting at the same
// address where that is not the in-place layout (the plan must stage such inputs).
enum class Form { separate, in_place, aliased };

struct Case {
  OpKind kind;
  int n;
  std::vector<int> devices;
  ReduceOp redop = ReduceOp::sum;
  int root = 0;
  Form form = Form::separate;
};

std::string name(const Case& c) {
  std::string d;
  for (int x : c.devices) d += std::to_string(x);
  return std::string(to_string(c.kind)) + " n=" + std::to_string(c.n) + " devices=" + d + " " +
         std::string(to_string(c.redop)) + " root=" + std::to_string(c.root) +
         (c.form == Form::in_place ? " in place" : c.form == Form::aliased ? " aliased" : "");
}

// Runs one case with int32 data (exact, avg truncating) and checks every output element.
void check(const Case& c) {
  SCOPED_TRACE(name(c));
  const std::size_t count = 5;  // per-peer block
  const int n = c.n;
  auto value = [](int peer, std::size_t k) { return static_cast<int32_t>(peer * 100 + static_cast<int>(k) - 7); };
  Memory mem;
  DeviceCollective op;
  op.kind = c.kind;
  op.dtype = DType::i32;
  op.redop = c.redop;
  op.root = c.root;
  op.count = count;
  op.label = name(c);
  std::vector<int32_t*> ins(n), outs(n);
  for (int p = 0; p < n; ++p) op.peers.push_back({c.devices[p], nullptr, nullptr});  // sizes need n
  for (int p = 0; p < n; ++p) {
    const int dev = c.devices[p];
    const std::size_t ib = input_bytes(op, p), ob = output_bytes(op, p);
    if (c.form == Form::in_place && (c.kind == OpKind::all_reduce || c.kind == OpKind::all_to_all ||
                                     c.kind == OpKind::reduce)) {
      auto* b = reinterpret_cast<int32_t*>(mem.make(std::max(ib, ob), dev));
      ins[p] = outs[p] = b;
    } else if (c.form == Form::in_place && c.kind == OpKind::reduce_scatter) {
      ins[p] = reinterpret_cast<int32_t*>(mem.make(ib, dev));
      outs[p] = ins[p] + p * count;  // the result lands on my own block of the input
    } else if (c.form == Form::in_place && (c.kind == OpKind::all_gather || (c.kind == OpKind::gather && p == c.root))) {
      outs[p] = reinterpret_cast<int32_t*>(mem.make(ob, dev));
      ins[p] = outs[p] + p * count;  // my input already sits in my block of the output
    } else if (c.form == Form::in_place && c.kind == OpKind::scatter && p == c.root) {
      ins[p] = reinterpret_cast<int32_t*>(mem.make(ib, dev));
      outs[p] = ins[p] + p * count;  // my share is my own block of the input
    } else if (c.form == Form::aliased && ib && ob) {
      auto* b = reinterpret_cast<int32_t*>(mem.make(std::max(ib, ob), dev));
      ins[p] = outs[p] = b;
    } else {
      ins[p] = ib ? reinterpret_cast<int32_t*>(mem.make(ib, dev)) : nullptr;
      outs[p] = ob ? reinterpret_cast<int32_t*>(mem.make(ob, dev)) : nullptr;
    }
    if (ins[p])
      for (std::size_t k = 0; k < ib / 4; ++k) ins[p][k] = value(p, k);
    // Sentinels in outputs, except where the output holds the input.
    if (outs[p] && c.form == Form::separate)
      for (std::size_t k = 0; k < ob / 4; ++k) outs[p][k] = -999;
    op.peers[p].in = ins[p];
    op.peers[p].out = outs[p];
  }
  // Inputs as the op saw them (in-place forms overwrite them).
  std::vector<std::vector<int32_t>> before(n);
  for (int p = 0; p < n; ++p)
    if (ins[p]) before[p].assign(ins[p], ins[p] + input_bytes(op, p) / 4);
  DevicePlan plan = plan_collective(op, [&](int device, std::size_t bytes) {
    EXPECT_EQ(device, lead_device(op)) << "scratch asked for on a device other than the lead";
    return mem.make(bytes, device);
  });
  EXPECT_EQ(plan.lead, lead_device(op));
  run_on_host(plan, mem, DType::i32, c.redop);

  auto fold = [&](std::size_t k, std::size_t block) {  // reduction of element k of block `block`
    int64_t acc = before[0][block * count + k];
    for (int j = 1; j < n; ++j) {
      int64_t v = before[j][block * count + k];
      acc = c.redop == ReduceOp::max ? std::max(acc, v) : acc + v;
    }
    if (c.redop == ReduceOp::avg) acc /= n;
    return static_cast<int32_t>(acc);
  };
  for (int p = 0; p < n; ++p)
    for (std::size_t k = 0; k < count; ++k) switch (c.kind) {
        case OpKind::all_reduce: ASSERT_EQ(outs[p][k], fold(k, 0)) << "peer " << p << " element " << k; break;
        case OpKind::reduce:
          if (p == c.root) {
            ASSERT_EQ(outs[p][k], fold(k, 0)) << "element " << k;
          } else if (c.form == Form::in_place) {
            ASSERT_EQ(outs[p][k], before[p][k]) << "non-root changed";
          }
          break;
        case OpKind::reduce_scatter: ASSERT_EQ(outs[p][k], fold(k, p)) << "peer " << p << " element " << k; break;
        case OpKind::broadcast:
        case OpKind::send: ASSERT_EQ(outs[p][k], before[c.root][k]) << "peer " << p << " element " << k; break;
        case OpKind::scatter: ASSERT_EQ(outs[p][k], before[c.root][p * count + k]) << "peer " << p; break;
        case OpKind::all_gather:
          for (int j = 0; j < n; ++j) ASSERT_EQ(outs[p][j * count + k], before[j][k]) << "peer " << p << " block " << j;
          break;
        case OpKind::gather:
          if (p == c.root) {
            for (int j = 0; j < n; ++j) ASSERT_EQ(outs[p][j * count + k], before[j][k]) << "block " << j;
          }
          break;
        case OpKind::all_to_all:
          for (int j = 0; j < n; ++j)
            ASSERT_EQ(outs[p][j * count + k], before[j][p * count + k]) << "peer " << p << " block " << j;
          break;
        default: break;
      }
}

std::vector<std::vector<int>> placements(int n) {
  std::vector<int> same(n, 0), distinct(n), pairs(n), shifted(n, 2);
  std::iota(distinct.begin(), distinct.end(), 0);
  for (int p = 0; p < n; ++p) pairs[p] = p % 2;
  return {same, distinct, pairs, shifted};
}

TEST(DevicePlan, EveryOpEveryPlacementMatchesTheReference) {
  const OpKind kinds[] = {OpKind::all_reduce, OpKind::reduce,  OpKind::broadcast, OpKind::all_gather,
                          OpKind::reduce_scatter, OpKind::all_to_all, OpKind::gather, OpKind::scatter};
  int cases = 0;
  for (OpKind kind : kinds)
    for (int n : {1, 2, 3, 5, 10})
      for (const auto& devs : placements(n))
        for (ReduceOp redop : {ReduceOp::sum, ReduceOp::max, ReduceOp::avg})
          for (int root : {0, n - 1}) {
            check({kind, n, devs, redop, root});
            ++cases;
            if (HasFatalFailure()) return;
          }
  EXPECT_EQ(cases, 8 * 5 * 4 * 3 * 2);
}

TEST(DevicePlan, InPlaceFormsMatchTheReference) {
  for (OpKind kind : {OpKind::all_reduce, OpKind::reduce, OpKind::reduce_scatter, OpKind::all_gather, OpKind::all_to_all,
                      OpKind::gather, OpKind::scatter})
    for (int n : {1, 2, 4, 9})
      for (const auto& devs : placements(n))
        for (int root : {0, n - 1}) {
          check({kind, n, devs, ReduceOp::sum, root, Form::in_place});
          if (HasFatalFailure()) return;
        }
}

TEST(DevicePlan, InputsOverlappingOutputsAreStagedFirst) {
  for (OpKind kind : {OpKind::all_gather, OpKind::reduce_scatter, OpKind::all_to_all, OpKind::gather, OpKind::scatter})
    for (int n : {2, 3, 5})
      for (const auto& devs : placements(n))
        for (int root : {0, n - 1}) {
          check({kind, n, devs, ReduceOp::sum, root, Form::aliased});
          if (HasFatalFailure()) return;
        }
}

TEST(DevicePlan, SendRecvIsACopyFromRankZero) {
  for (const auto& devs : placements(2)) check({OpKind::send, 2, devs});
}

// Logical peers on one GPU: one fused kernel reads every input once and writes every output once.
TEST(DevicePlan, AllReduceOnOneGpuIsOneFusedPass) {
  Memory mem;
  DeviceCollective op;
  op.kind = OpKind::all_reduce;
  op.count = 1024;
  for (int p = 0; p < 4; ++p) {
    auto* b = mem.make(4096, 0);
    op.peers.push_back({0, b, b});
  }
  int scratch = 0;
  DevicePlan plan = plan_collective(op, [&](int, std::size_t b) { return ++scratch, mem.make(b, 0); });
  ASSERT_EQ(plan.steps.size(), 1u);
  ASSERT_EQ(plan.steps[0].kind, DeviceStep::Kind::reduce);
  EXPECT_EQ(plan.steps[0].reduce.srcs.size(), 4u);
  EXPECT_EQ(plan.steps[0].reduce.dsts.size(), 4u);
  EXPECT_EQ(plan.steps[0].reduce.divisor, 1u);
  EXPECT_EQ(scratch, 0);
}

TEST(DevicePlan, AvgDividesByThePeerCount) {
  Memory mem;
  DeviceCollective op;
  op.kind = OpKind::reduce_scatter;
  op.redop = ReduceOp::avg;
  op.count = 3;
  for (int p = 0; p < 3; ++p) op.peers.push_back({0, mem.make(36, 0), mem.make(12, 0)});
  DevicePlan plan = plan_collective(op, [&](int, std::size_t b) { return mem.make(b, 0); });
  ASSERT_EQ(plan.steps.size(), 1u);  // one pass for every block (below)
  EXPECT_EQ(plan.steps[0].reduce.divisor, 3u);
}

TEST(DevicePlan, LeadIsTheRootsDeviceForRootedOps) {
  DeviceCollective op;
  op.kind = OpKind::reduce;
  op.root = 2;
  op.peers = {{0, nullptr, nullptr}, {1, nullptr, nullptr}, {3, nullptr, nullptr}};
  EXPECT_EQ(lead_device(op), 3);
  op.kind = OpKind::all_reduce;
  EXPECT_EQ(lead_device(op), 0);
}

// Logical peers on one GPU: an all_gather's 16 small copies are one batch (one kernel), and the
// plan still gives the reference result (the checks above run batches in reverse order).
TEST(DevicePlan, AllGatherOnOneGpuIsOneCopyKernel) {
  Memory mem;
  DeviceCollective op;
  op.kind = OpKind::all_gather;
  op.count = 16;
  for (int p = 0; p < 4; ++p) op.peers.push_back({0, mem.make(64, 0), mem.make(4 * 64, 0)});
  DevicePlan plan = plan_collective(op, [&](int, std::size_t b) { return mem.make(b, 0); });
  ASSERT_EQ(plan.steps.size(), 1u);
  ASSERT_EQ(plan.steps[0].kind, DeviceStep::Kind::copies);
  EXPECT_EQ(plan.steps[0].copies.copies.size(), 16u);
  check({OpKind::all_gather, 4, {0, 0, 0, 0}});
}

// A gather's non-roots pass their input where the output goes (as the runtime hands them over):
// nothing is staged for outputs the op does not write; the root's copies are one batch.
TEST(DevicePlan, AGatherStagesNothingForTheNonRootsOutputs) {
  Memory mem;
  DeviceCollective op;
  op.kind = OpKind::gather;
  op.root = 2;
  op.count = 16;
  for (int p = 0; p < 4; ++p) {
    auto* in = mem.make(64, 0);
    op.peers.push_back({0, in, p == 2 ? mem.make(4 * 64, 0) : in});
  }
  int scratch = 0;
  DevicePlan plan = plan_collective(op, [&](int, std::size_t b) { return ++scratch, mem.make(b, 0); });
  EXPECT_EQ(scratch, 0);
  ASSERT_EQ(plan.steps.size(), 1u);
  ASSERT_EQ(plan.steps[0].kind, DeviceStep::Kind::copies);
  EXPECT_EQ(plan.steps[0].copies.copies.size(), 4u);
}

// Logical peers on one GPU: a reduce-scatter's blocks are one pass (one kernel, grid row per
// block), out of place and in place, with the reference result.
TEST(DevicePlan, ReduceScatterOnOneGpuIsOnePass) {
  Memory mem;
  DeviceCollective op;
  op.kind = OpKind::reduce_scatter;
  op.count = 8;
  for (int p = 0; p < 4; ++p) op.peers.push_back({0, mem.make(4 * 32, 0), mem.make(32, 0)});
  DevicePlan plan = plan_collective(op, [&](int, std::size_t b) { return mem.make(b, 0); });
  ASSERT_EQ(plan.steps.size(), 1u);
  ASSERT_EQ(plan.steps[0].kind, DeviceStep::Kind::reduce);
  EXPECT_EQ(plan.steps[0].reduce.block_stride, 32u);
  EXPECT_EQ(plan.steps[0].reduce.dsts.size(), 4u);
  check({OpKind::reduce_scatter, 4, {0, 0, 0, 0}});
  check({OpKind::reduce_scatter, 4, {0, 0, 0, 0}, ReduceOp::avg, 0, Form::in_place});
  check({OpKind::reduce_scatter, 3, {1, 1, 1}, ReduceOp::max, 0, Form::aliased});
}

DeviceStep copy_step(void* dst, const void* src, std::size_t bytes, int dd = 0, int sd = 0) {
  DeviceStep s{DeviceStep::Kind::copy};
  s.copy = {dst, dd, src, sd, bytes};
  return s;
}

// What binds an order ends a batch: reading what an earlier copy wrote, writing what it read or
// wrote. Large copies, other devices' copies and reductions run alone, in their place.
TEST(DevicePlan, BatchesEndWhereOrderMattersAndTakeOnlySmallCopiesOnTheLead) {
  std::vector<std::byte> m(1 << 12);
  std::byte* b = m.data();
  auto kinds = [](const std::vector<DeviceStep>& st) {
    std::vector<std::size_t> k;
    for (auto& s : st) k.push_back(s.kind == DeviceStep::Kind::copies ? s.copies.copies.size() : 0);
    return k;
  };
  // a->b, c->d independent; then b->e reads what the first wrote: a new batch.
  auto st = batch_copies({copy_step(b + 100, b, 10), copy_step(b + 300, b + 200, 10), copy_step(b + 400, b + 105, 10),
                          copy_step(b + 500, b + 600, 10)},
                         0);
  EXPECT_EQ(kinds(st), (std::vector<std::size_t>{2, 2}));
  // Writing what an earlier copy reads (a->b then c->a), and writing what it writes.
  st = batch_copies({copy_step(b + 100, b, 10), copy_step(b + 5, b + 200, 10)}, 0);
  EXPECT_EQ(kinds(st), (std::vector<std::size_t>{0, 0}));
  st = batch_copies({copy_step(b + 100, b, 10), copy_step(b + 109, b + 200, 10)}, 0);
  EXPECT_EQ(kinds(st), (std::vector<std::size_t>{0, 0}));
  // Adjacent but not overlapping ranges batch.
  st = batch_copies({copy_step(b + 100, b, 10), copy_step(b + 110, b + 10, 10)}, 0);
  EXPECT_EQ(kinds(st), (std::vector<std::size_t>{2}));
  // A large copy, a copy from another device and a reduction split the runs and stay themselves.
  DeviceStep red{DeviceStep::Kind::reduce};
  st = batch_copies({copy_step(b + 100, b, 10), copy_step(b + 200, b + 20, 10),
                     copy_step(b + 1000, b + 2000, kBatchedCopyBytes + 1), copy_step(b + 300, b + 40, 10),
                     copy_step(b + 400, b + 60, 10, 0, 1), copy_step(b + 500, b + 80, 10), red,
                     copy_step(b + 600, b + 90, 10), copy_step(b + 700, b + 95, 1)},
                    0);
  EXPECT_EQ(kinds(st), (std::vector<std::size_t>{2, 0, 0, 0, 0, 0, 2}));
  EXPECT_EQ(st[1].copy.bytes, kBatchedCopyBytes + 1);
  EXPECT_EQ(st[3].copy.src_device, 1);
  EXPECT_EQ(st[5].kind, DeviceStep::Kind::reduce);
  // Past the kernel's table a batch ends.
  std::vector<DeviceStep> many;
  for (int i = 0; i < kMaxBatchedCopies + 3; ++i) many.push_back(copy_step(b + 2048 + i, b + i, 1));
  EXPECT_EQ(kinds(batch_copies(many, 0)), (std::vector<std::size_t>{static_cast<std::size_t>(kMaxBatchedCopies), 3}));
}

} // namespace
