// The trace (observability/trace/, CHORUS_TRACE / Config::trace_file): the file of a 3-peer run is
// valid JSON with exactly the expected op spans per rank, their match and step sub-spans inside
// them, and metadata naming the process and every rank; the executor's spans of remote steps;
// the bound on records; the naming rule of the file; CHORUS_TRACE winning over the config; off
// by default.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>

#include <chorus/chorus.hpp>
#include "runtime/runtime_impl.hpp"
#include "observability/trace/trace.hpp"
#include "observability/trace/trace_json.hpp"
#include "core/trace_name.hpp"
#include "peer_harness.hpp"
#include "strategies/executor.hpp"
#include "trace_reader.hpp"

namespace chorus {
namespace {

using testing_json::Json;
using testing_json::JsonReader;
using testing_json::Span;
using testing_json::TraceRead;

TEST(JsonReader, RejectsWhatJsonDoesNot) {
  Json j;
  std::string e;
  EXPECT_TRUE(JsonReader(R"({"a":[1,-2.5e3,"x\n\u0041"],"b":{},"c":null})").read(j, e)) << e;
  EXPECT_EQ(j.get("a")->items[2].text, "x\nA");
  for (const char* bad : {"{\"a\":1,}", "[01]", "[1.]", "{\"a\" 1}", "\"tab\there\"", "[1] x", "{a:1}", "[\"\\q\"]", "[tru]"})
    EXPECT_FALSE(JsonReader(bad).read(j, e)) << bad;
}

TEST(TraceName, PidNodeAndTheNodeInsertedInMultiNodeMode) {
  EXPECT_EQ(trace_file_name("t.json", 42, -1, false), "t.json");
  EXPECT_EQ(trace_file_name("t.%p.json", 42, -1, false), "t.42.json");
  EXPECT_EQ(trace_file_name("t.%n.json", 42, -1, false), "t.0.json") << "one process is node 0";
  EXPECT_EQ(trace_file_name("trace.json", 42, 1, true), "trace.node1.json");
  EXPECT_EQ(trace_file_name("out.d/trace", 42, 2, true), "out.d/trace.node2") << "the directory's dot is no extension";
  EXPECT_EQ(trace_file_name(".trace", 42, 0, true), ".trace.node0");
  EXPECT_EQ(trace_file_name("t.%n.json", 42, 3, true), "t.3.json") << "%n names the file: nothing inserted";
  EXPECT_EQ(trace_file_name("t-%p.json", 42, 3, true), "t-42.json");
  EXPECT_EQ(trace_file_name("100%%.json", 42, 3, true), "100%.node3.json") << "%% names nothing";
  EXPECT_EQ(trace_file_name("trace.json", 42, -1, true), "trace.pid42.json") << "a node that never joined";
  EXPECT_EQ(trace_pattern_problem("a%p%n%%.json"), "");
  EXPECT_NE(trace_pattern_problem("t%x.json").find("%x"), std::string::npos);
  EXPECT_NE(trace_pattern_problem("t%").find("lone %"), std::string::npos);
  Config cfg;
  cfg.trace_file = "t%d.json";
  EXPECT_EQ(cfg.validate().code(), Errc::invalid_config);
  EXPECT_NE(cfg.validate().message().find("trace_file"), std::string::npos) << cfg.validate().message();
}

TEST(Trace, TheEnvironmentWinsAndAWrongPatternThereIsAConfigError) {
  if (std::getenv("CHORUS_TRACE")) GTEST_SKIP() << "CHORUS_TRACE is set";
  Config cfg = harness::config_for(2);
  cfg.trace_file = "from-config.json";
  ASSERT_EQ(::setenv("CHORUS_TRACE", "from-env-%p.json", 1), 0);
  auto t = Trace::for_config(cfg);
  ASSERT_EQ(::setenv("CHORUS_TRACE", "bad-%z.json", 1), 0);
  auto bad = Trace::for_config(cfg);
  ::unsetenv("CHORUS_TRACE");
  ASSERT_TRUE(t.is_ok() && *t);
  EXPECT_EQ((*t)->path(), "from-env-" + std::to_string(::getpid()) + ".json");
  EXPECT_TRUE((*t)->peer(1) && !(*t)->peer(2)) << "one part per local peer";
  EXPECT_EQ(bad.status().code(), Errc::invalid_config);
  EXPECT_NE(bad.status().message().find("CHORUS_TRACE"), std::string::npos) << bad.status().message();
  auto from_config = Trace::for_config(cfg);
  ASSERT_TRUE(from_config.is_ok() && *from_config);
  EXPECT_EQ((*from_config)->path(), "from-config.json");
}

TEST(Trace, OffByDefault) {
  if (std::getenv("CHORUS_TRACE")) GTEST_SKIP() << "CHORUS_TRACE is set";
  Runtime rt;
  auto p = rt.register_peer(0, harness::config_for(1));
  ASSERT_TRUE(p.is_ok());
  Tensor t = Tensor::from(std::vector<float>{1, 2});
  ASSERT_TRUE(p->all_reduce(t, ReduceOp::sum).is_ok());
  EXPECT_FALSE(RuntimeAccess::impl(rt).trace) << "no trace, so no file";
}

// What every rank of the 3-peer run called, in order (rank 2 passes a different shape in #2, so
// every rank fails it with shape_mismatch).
constexpr std::array<const char*, 4> kOps{"all_reduce #0", "broadcast #1", "all_reduce #2", "all_reduce #3"};

// The centralized schedule's steps per rank (strategies/centralized.cpp): the hub of an
// all_reduce (rank 0) receives both others' data in one fused pass, then waits until each has
// read the result; the others send, then copy the result. Broadcast's root (rank 1) sends to each.
std::vector<std::string> steps_expected(uint32_t rank, const std::string& op) {
  if (op.rfind("broadcast", 0) == 0) return rank == 1 ? std::vector<std::string>{"send", "send"} : std::vector<std::string>{"recv copy"};
  if (op == kOps[2]) return {};
  return rank == 0 ? std::vector<std::string>{"recv reduce", "send", "send"} : std::vector<std::string>{"send", "recv copy"};
}

TEST(Trace, ThreePeersWriteTheirOpsWithMatchAndStepsInside) {
  if (std::getenv("CHORUS_TRACE")) GTEST_SKIP() << "CHORUS_TRACE wins over the file this test names";
  const std::string path = ::testing::TempDir() + "chorus-trace-" + std::to_string(::getpid()) + ".json";
  std::remove(path.c_str());
  Config cfg = harness::config_for(3, "centralized");
  cfg.trace_file = path;
  std::vector<std::array<std::string, 4>> strategy(3);
  std::vector<Status> failed(3);
  {
    Runtime rt;
    harness::run_peers(rt, cfg, [&](Peer& p) {
      const uint32_t r = p.rank();
      Tensor t = Tensor::zeros(DType::f32, {256});
      ASSERT_TRUE(p.all_reduce(t, ReduceOp::sum).is_ok());
      strategy[r][0] = p.last_strategy();
      ASSERT_TRUE(p.broadcast(t, 1).is_ok());
      strategy[r][1] = p.last_strategy();
      Tensor odd = Tensor::zeros(DType::f32, {r == 2 ? 128 : 256});
      failed[r] = p.all_reduce(odd, ReduceOp::sum);
      ASSERT_TRUE(p.all_reduce(t, ReduceOp::max).is_ok());
      strategy[r][3] = p.last_strategy();
    });
    EXPECT_EQ(RuntimeAccess::impl(rt).trace->path(), path);
  }  // the Runtime's shutdown writes the file
  const TraceRead trace(path);
  EXPECT_EQ(trace.meta.at({"process_name", 0}), "process " + std::to_string(::getpid()));
  EXPECT_EQ(trace.other_num("dropped_events"), 0u);
  for (uint32_t r = 0; r < 3; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const int64_t tid = r + 1;
    EXPECT_EQ(failed[r].code(), Errc::shape_mismatch);
    EXPECT_EQ(trace.meta.at({"thread_name", tid}), "rank " + std::to_string(r));
    ASSERT_TRUE(trace.spans.count(tid));
    const auto ops = trace.of(tid, "op"), matches = trace.of(tid, "match"), steps = trace.of(tid, "step");
    ASSERT_EQ(ops.size(), kOps.size());
    EXPECT_EQ(matches.size(), 3u) << "the failed op never got a plan";
    std::size_t steps_seen = 0;
    for (std::size_t k = 0; k < ops.size(); ++k) {
      const Span& op = ops[k];
      EXPECT_EQ(op.name, kOps[k]);
      EXPECT_EQ(op.arg("group"), 0u);
      EXPECT_EQ(op.arg("seq"), k);
      EXPECT_EQ(op.arg("bytes"), k == 2 && r == 2 ? 512u : 1024u);
      EXPECT_EQ(op.text("dtype"), "f32");
      if (k == 2) {
        EXPECT_EQ(op.text("strategy"), "(none)");
        EXPECT_NE(op.text("status").find("shape_mismatch"), std::string::npos) << op.text("status");
        EXPECT_EQ(op.args->get("shape")->items.at(0).number, r == 2 ? 128 : 256);
      } else {
        EXPECT_EQ(op.text("strategy"), strategy[r][k]);
        EXPECT_EQ(op.text("strategy"), "centralized");
        EXPECT_EQ(op.text("status"), "(none)");
      }
      EXPECT_EQ(op.text("reduce_op"), k == 1 ? "(none)" : k == 3 ? "max" : "sum");
      if (k == 1) {
        EXPECT_EQ(op.arg("root"), 1u);
      }
      // Its match starts with it; its steps come after the match, inside it, in the schedule's order.
      const auto match = std::find_if(matches.begin(), matches.end(), [&](const Span& m) { return m.inside(op); });
      EXPECT_EQ(match != matches.end(), k != 2);
      if (match != matches.end()) {
        EXPECT_EQ(match->begin, op.begin);
      }
      std::vector<std::string> names;
      for (const Span& s : steps)
        if (s.inside(op)) {
          if (match != matches.end()) {
            EXPECT_GE(s.begin, match->end) << s.name;
          }
          EXPECT_EQ(s.arg("bytes"), 1024u);
          names.push_back(s.name);
        }
      EXPECT_EQ(names, steps_expected(r, op.name)) << op.name;
      steps_seen += names.size();
    }
    EXPECT_EQ(steps_seen, steps.size()) << "every step lies inside an op";
  }
  EXPECT_EQ(trace.of(1, "step")[0].arg("sources"), 2u) << "the hub reduces both others' data in one pass";
  if (!std::getenv("KEEP")) std::remove(path.c_str());
}

TEST(Trace, KeepsWhatItsBudgetAllowsAndCountsTheRest) {
  const std::string path = ::testing::TempDir() + "chorus-trace-budget-" + std::to_string(::getpid()) + ".json";
  TraceBudget budget(5);
  {
    Trace trace(path, 1, false, budget);
    PeerTrace& p = *trace.peer(0);
    EXPECT_EQ(trace.peer(1), nullptr);
    Tensor t = Tensor::zeros(DType::i32, {2, 3, 4, 5, 6});
    for (uint64_t seq = 0; seq < 3; ++seq) {  // 3 ops of 2 steps: 9 records
      FlightOp op;
      op.op.seq = seq;
      op.data = &t;
      OpSpan span;
      p.begin(span, op);
      p.matched(span, RunStrategy::flat(Strategy{Algorithm::ring, 2}));
      for (int k = 0; k < 2; ++k) p.step(StepSpan{StepKind::copy, false, false, -1, 1, 8, p.now()});
      p.end(span, Status::ok());
    }
    EXPECT_EQ(budget.left(), 0u);
    EXPECT_EQ(p.dropped(), 4u);
    auto written = trace.write();
    ASSERT_TRUE(written.is_ok()) << written.status().to_string();
    EXPECT_EQ(*written, path);
    const TraceRead read(path);
    EXPECT_EQ(read.other_num("kept_events"), 5u);
    EXPECT_EQ(read.other_num("dropped_events"), 4u);
    std::size_t spans = 0;
    for (const auto& [tid, v] : read.spans) spans += v.size();
    EXPECT_EQ(spans, 5u);
  }
  EXPECT_EQ(budget.left(), 5u) << "a trace gives its records back when it goes";
  std::remove(path.c_str());
}

TEST(Trace, AnOpSpanSaysItsShapeAndStrategy) {
  const std::string path = ::testing::TempDir() + "chorus-trace-op-" + std::to_string(::getpid()) + ".json";
  TraceBudget budget(100);
  Trace trace(path, 2, true, budget);
  trace.set_node(4, 6);
  EXPECT_EQ(trace.path(), ::testing::TempDir() + "chorus-trace-op-" + std::to_string(::getpid()) + ".node4.json");
  Tensor t = Tensor::zeros(DType::i32, {2, 3, 4, 5, 6});
  FlightOp op;
  op.op.kind = OpKind::reduce;
  op.op.seq = 9;
  op.op.group = 3;
  op.rank = 1;
  op.op.root = 2;
  op.op.redop = ReduceOp::bxor;
  op.data = &t;
  OpSpan span;
  trace.peer(1)->begin(span, op);
  trace.peer(1)->matched(span, RunStrategy::among_leaders(Strategy{Algorithm::tree, 3}));
  trace.peer(1)->end(span, Status(Errc::node_lost, "node 2 \"gone\""));
  auto written = trace.write();
  ASSERT_TRUE(written.is_ok()) << written.status().to_string();
  const TraceRead read(*written);
  EXPECT_EQ(read.meta.at({"process_name", 0}), "node 4");
  EXPECT_EQ(read.meta.at({"thread_name", 8}), "rank 7") << "local peer 1 of a node whose first rank is 6";
  EXPECT_EQ(read.other_num("node"), 4u);
  const auto ops = read.of(8, "op");
  ASSERT_EQ(ops.size(), 1u);
  const Span& s = ops[0];
  EXPECT_EQ(s.name, "reduce #9");
  EXPECT_EQ(s.arg("group"), 3u);
  EXPECT_EQ(s.arg("rank"), 1u);
  EXPECT_EQ(s.arg("root"), 2u);
  EXPECT_EQ(s.arg("bytes"), 2880u);
  EXPECT_EQ(s.arg("dims"), 5u) << "the shape keeps its first four sizes";
  ASSERT_EQ(s.args->get("shape")->items.size(), 4u);
  EXPECT_EQ(s.args->get("shape")->items[3].number, 5);
  EXPECT_EQ(s.text("dtype"), "i32");
  EXPECT_EQ(s.text("reduce_op"), "bxor");
  EXPECT_EQ(s.text("strategy"), "hier+tree:3");
  EXPECT_EQ(s.text("status"), "node_lost: node 2 \"gone\"");
  std::remove(written->c_str());
}

// A RemoteSteps whose other node is played by the test: peer 1 is remote, its data is `theirs`.
class FakeRemote : public RemoteSteps {
 public:
  explicit FakeRemote(std::vector<float> theirs) : theirs_(std::move(theirs)) {}
  bool is_remote(int peer) const override { return peer == 1; }
  void post_send(uint32_t, int, const std::byte* data, std::size_t bytes) override {
    sent_.assign(reinterpret_cast<const float*>(data), reinterpret_cast<const float*>(data + bytes));
  }
  Status wait_sent(uint32_t) override { return Status::ok(); }
  const std::byte* wait_received(uint32_t, int, std::size_t, std::size_t, Status&) override {
    return reinterpret_cast<const std::byte*>(theirs_.data());
  }
  void done_with(uint32_t) override {}
  bool offer_destination(uint32_t, int, std::byte*, std::size_t) override { return false; }
  void abort(const Status&) override {}
  Status conclude(int, Status local) override { return local; }
  const std::vector<float>& sent() const { return sent_; }

 private:
  std::vector<float> theirs_, sent_;
};

// Counts instead of a clock, so every span's ends are known.
class CountingTrace final : public StepTrace {
 public:
  uint64_t now() override { return ++ticks; }
  void step(const StepSpan& s) override { spans.push_back({s, ++ticks}); }
  void concluded(uint64_t begin) override { conclude = {begin, ++ticks}; }
  uint64_t ticks = 0;
  std::vector<std::pair<StepSpan, uint64_t>> spans;
  std::pair<uint64_t, uint64_t> conclude{0, 0};
};

// Rank 0 of a centralized all_reduce over two nodes: it receives rank 1's data from the other
// node, then sends it the sum; the trace hears of each remote step and of the wait to conclude.
TEST(Trace, TheExecutorNamesRemoteStepsToItsTrace) {
  auto schedule = CompiledSchedule::compile(
      make_schedule({OpKind::all_reduce, Strategy{Algorithm::centralized, 2}, 2, 0, 4, sizeof(float)}));
  auto remote = std::make_shared<FakeRemote>(std::vector<float>{10, 20, 30, 40});
  OpPlan plan(OpDesc::of(OpKind::all_reduce, DType::f32, ReduceOp::sum, 0, 4), 2, schedule, Clock::now() + std::chrono::seconds(10),
              "all_reduce #0", remote);
  std::vector<float> in{1, 2, 3, 4}, out(4);
  WorkBuffer work = WorkBuffer::bind(OpKind::all_reduce, 0, 2, 0, 4, DType::f32, reinterpret_cast<const std::byte*>(in.data()),
                                     reinterpret_cast<std::byte*>(out.data()));
  CountingTrace trace;
  ASSERT_TRUE(plan.run(0, work, &trace).is_ok());
  EXPECT_EQ(out, (std::vector<float>{11, 22, 33, 44}));
  EXPECT_EQ(remote->sent(), out);
  ASSERT_EQ(trace.spans.size(), 3u);
  const StepSpan& recv = trace.spans[0].first;
  EXPECT_EQ(recv.kind, StepKind::recv_reduce);
  EXPECT_TRUE(recv.remote);
  EXPECT_EQ(recv.peer, 1);
  EXPECT_EQ(recv.bytes, 16u);
  const StepSpan& post = trace.spans[1].first;
  EXPECT_TRUE(post.kind == StepKind::send && post.remote && post.post);
  const StepSpan& went = trace.spans[2].first;
  EXPECT_TRUE(went.kind == StepKind::send && went.remote && !went.post);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_LT(trace.spans[i].first.begin, trace.spans[i].second);
    if (i) {
      EXPECT_GT(trace.spans[i].first.begin, trace.spans[i - 1].second) << "steps follow one another";
    }
  }
  EXPECT_GT(trace.conclude.first, trace.spans[2].second);
  EXPECT_GT(trace.conclude.second, trace.conclude.first);
  StepRecord named{post, 0, false};
  EXPECT_EQ(step_span_name(named), "remote send");
  named.span = went;
  EXPECT_EQ(step_span_name(named), "remote send wait");
  named.span = recv;
  EXPECT_EQ(step_span_name(named), "remote recv reduce");
}

TEST(Trace, ASpanLogKeepsItsRecordsInOrderAcrossChunks) {
  TraceBudget budget(5000);
  SpanLog<uint64_t> log(budget);
  for (uint64_t i = 0; i < 3000; ++i) ASSERT_TRUE(log.push(i));
  uint64_t next = 0;
  log.for_each([&](uint64_t v) { EXPECT_EQ(v, next++); });
  EXPECT_EQ(next, 3000u);
  EXPECT_EQ(log.size(), 3000u);
  EXPECT_EQ(log.dropped(), 0u);
}

} // namespace
} // namespace chorus
