// The flight recorder (observability/flight/): what a peer's op leaves in it, the ring forgetting the
// oldest, the file read back as written, the report naming the first divergence (a rank that did
// not call, one that never called any op, a call that differs, a failure), a dump written on its
// own after a timeout that names the op and the missing rank, and SIGUSR1 writing every recorder
// of the process.
#include <gtest/gtest.h>

#include <signal.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <chorus/chorus.hpp>
#include "observability/flight/flight_file.hpp"
#include "observability/flight/flight_recorder.hpp"
#include "observability/flight/flight_report.hpp"
#include "observability/flight/flight_spare.hpp"
#include "runtime/runtime_impl.hpp"
#include "core/wait.hpp"
#include "peer_harness.hpp"
#include "test_events.hpp"

namespace chorus {
namespace {

using harness::config_for;

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

FlightOp op_of(uint32_t peer, uint64_t seq, OpKind kind, const Tensor* t) {
  FlightOp o;
  o.peer = o.rank = peer;
  o.op.seq = seq;
  o.op.kind = kind;
  o.data = t;
  return o;
}

TEST(FlightRecorder, RecordsEntryMatchAndEndAndForgetsTheOldest) {
  FlightRecorder r(2, 3, "/nonexistent");
  Tensor t = Tensor::zeros(DType::f32, {2, 3});
  for (uint64_t seq = 0; seq < 5; ++seq) {
    const uint64_t k = r.begin(1, op_of(1, seq, OpKind::all_reduce, &t));
    ASSERT_NE(k, 0u);
    r.matched(1, k, RunStrategy::of(RunStrategy::Path::p2p));
    if (seq < 4) r.end(1, k, Status::ok());
  }
  EXPECT_EQ(r.begin(2, op_of(2, 0, OpKind::barrier, nullptr)), 0u) << "peer 2 is not local";
  auto rows = r.rows();
  ASSERT_EQ(rows.size(), 3u) << "a ring of 3 keeps the last 3 ops";
  EXPECT_EQ(rows[0].op.seq, 2u);
  EXPECT_EQ(rows[2].op.seq, 4u);
  EXPECT_EQ(rows[1].state, FlightState::done);
  EXPECT_EQ(rows[2].state, FlightState::running) << "matched, not ended";
  EXPECT_EQ(rows[2].strategy, "p2p");
  EXPECT_EQ(rows[2].shape, (Shape{2, 3}));
  EXPECT_EQ(rows[2].bytes, 24u);
  EXPECT_EQ(rows[2].op.count, 6u) << "the op's description takes its count and dtype from the tensor";
  EXPECT_EQ(rows[2].op.dtype, DType::f32);
  EXPECT_FALSE(rows[2].op.on_device);
  EXPECT_EQ(rows[2].exit_ns, 0);
  EXPECT_GT(rows[1].exit_ns, 0);
  EXPECT_LE(rows[1].enter_ns, rows[1].matched_ns);
  EXPECT_LE(rows[1].matched_ns, rows[1].exit_ns);
}

// A failure's dump is on disk when end() returns, with the rows as they were when the op failed
// (an op begun after it is not in it).
TEST(FlightRecorder, AFailuresDumpHoldsTheRowsOfItsMoment) {
  const std::string dir = ::testing::TempDir();
  FlightRecorder r(1, 8, dir);
  Tensor t = Tensor::zeros(DType::f32, {4});
  const uint64_t ok = r.begin(0, op_of(0, 0, OpKind::all_reduce, &t));
  r.end(0, ok, Status::ok());
  const uint64_t bad = r.begin(0, op_of(0, 1, OpKind::all_reduce, &t));
  r.end(0, bad, Status(Errc::node_lost, "node 3 lost: its process exited"));
  r.begin(0, op_of(0, 2, OpKind::broadcast, &t));  // after the failure
  auto d = parse_flight_dump(read_file(r.path()));
  ASSERT_TRUE(d.is_ok()) << r.path() << ": " << d.status().to_string();
  EXPECT_NE(d->reason.find("all_reduce f32[4] sum #1 failed at rank 0: node_lost"), std::string::npos) << d->reason;
  ASSERT_EQ(d->rows.size(), 2u) << "the broadcast began after the failure";
  EXPECT_EQ(d->rows[0].state, FlightState::done);
  EXPECT_EQ(d->rows[1].op.seq, 1u);
  EXPECT_EQ(d->rows[1].state, FlightState::failed);
  EXPECT_NE(d->rows[1].error.find("node 3 lost"), std::string::npos) << d->rows[1].error;
  std::remove(r.path().c_str());
}

// A dump made ahead: written and named, over an older dump too, and another spare made behind
// each; the files hold what was written, and no spare is left beside them under another name.
TEST(FlightRecorder, ADumpIsWrittenIntoTheFileMadeAhead) {
  const std::string dir = ::testing::TempDir() + "/spare-" + std::to_string(::getpid());
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0) << dir;
  if (const int probe = ::open(dir.c_str(), O_TMPFILE | O_RDWR, 0600); probe >= 0) {
    ::close(probe);
  } else {
    std::filesystem::remove_all(dir);
    GTEST_SKIP() << "the file system of " << dir << " has no O_TMPFILE (dumps make their file)";
  }
  const std::string path = dir + "/chorus-flight-test.txt";
  FlightSpare spare(dir);
  for (int round = 0; round < 2; ++round) {
    ASSERT_TRUE(spare.wait_ready(std::chrono::steady_clock::now() + std::chrono::seconds(10)))
        << "no O_TMPFILE spare in " << dir;
    const int fd = spare.take();
    ASSERT_GE(fd, 0);
    FlightDump d;
    d.pid = 7;
    d.node = round;
    d.reason = "round " + std::to_string(round);
    auto written = write_flight_file(path, d, fd);
    ASSERT_TRUE(written.is_ok()) << written.status().to_string();
    auto back = parse_flight_dump(read_file(path));
    ASSERT_TRUE(back.is_ok()) << back.status().to_string();
    EXPECT_EQ(back->reason, "round " + std::to_string(round));
    EXPECT_EQ(back->node, round);
  }
  EXPECT_TRUE(spare.wait_ready(std::chrono::steady_clock::now() + std::chrono::seconds(10))) << "none made behind";
  std::size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files += e.is_regular_file();
  EXPECT_EQ(files, 1u) << "only the dump, named";
  std::filesystem::remove_all(dir);
}

// Without a spare (the file system has no O_TMPFILE, or none is ready) the dump makes its file.
TEST(FlightRecorder, ADumpWithoutASpareMakesItsFile) {
  const std::string path = ::testing::TempDir() + "/chorus-flight-nospare-" + std::to_string(::getpid()) + ".txt";
  FlightDump d;
  d.reason = "no spare";
  ASSERT_TRUE(write_flight_file(path, d, -1).is_ok());
  auto back = parse_flight_dump(read_file(path));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->reason, "no spare");
  std::remove(path.c_str());
}

TEST(FlightRecorder, TheFileReadsBackAsWritten) {
  FlightDump d;
  d.pid = 42;
  d.node = 3;
  d.host = "box \"one\"";
  d.reason = "timeout: peers 1, 2\nnever called";
  d.written_ns = 1764045600123456789;
  d.world = 6;
  FlightRow a;
  a.peer = 5;
  a.rank = 1;
  a.op.group = 7;
  a.op.seq = 12;
  a.op.kind = OpKind::reduce;
  a.has_data = true;
  a.op.dtype = DType::bf16;
  a.shape = {4, 1, 8};
  a.op.redop = ReduceOp::max;
  a.op.root = 2;
  a.bytes = 64;
  a.strategy = "hier+ring";
  a.state = FlightState::failed;
  a.enter_ns = 10;
  a.matched_ns = 20;
  a.exit_ns = 30;
  a.error = "node_lost: node 1 lost: \"gone\"";
  FlightRow b;
  b.peer = 5;
  b.op.kind = OpKind::recv;
  b.op.seq = kNoSeq;
  b.other = 3;
  b.tag = 99;
  d.rows = {a, b};
  auto back = parse_flight_dump(write_flight_dump(d));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->pid, 42);
  EXPECT_EQ(back->node, 3);
  EXPECT_EQ(back->host, d.host);
  EXPECT_EQ(back->reason, d.reason);
  EXPECT_EQ(back->written_ns, d.written_ns);
  EXPECT_EQ(back->world, 6);
  ASSERT_EQ(back->rows.size(), 2u);
  const FlightRow& x = back->rows[0];
  EXPECT_EQ(x.describe(), "reduce bf16[4, 1, 8] max root 2");
  EXPECT_EQ(x.op.group, 7u);
  EXPECT_EQ(x.op.seq, 12u);
  EXPECT_EQ(x.op.root, 2);
  EXPECT_EQ(x.op.count, 32u) << "the count is the shape's elements";
  EXPECT_EQ(back->rows[1].op.count, 0u) << "no data, no count";
  EXPECT_EQ(x.rank, 1u);
  EXPECT_EQ(x.strategy, "hier+ring");
  EXPECT_EQ(x.state, FlightState::failed);
  EXPECT_EQ(x.enter_ns + x.matched_ns + x.exit_ns, 60);
  EXPECT_EQ(x.error, a.error);
  EXPECT_FALSE(back->rows[1].collective());
  EXPECT_EQ(back->rows[1].describe(), "recv from 3 tag 99");
  auto bad = parse_flight_dump("# chorus flight recorder, format 1\nprocess pid=1 node=0 host=\"h\" written_ns=1 reason=\"\"\n"
                               "op peer=1 rank=x\n");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("line 3"), std::string::npos) << bad.status().message();
  EXPECT_FALSE(parse_flight_dump("hello\n").is_ok());
  // A file of an older chorus has no world: it reads as not known.
  auto old = parse_flight_dump("# chorus flight recorder, format 1\nprocess pid=1 node=0 host=\"h\" written_ns=1 reason=\"\"\n");
  ASSERT_TRUE(old.is_ok()) << old.status().to_string();
  EXPECT_EQ(old->world, -1);
}

// Rows of one collective as ranks would record them.
FlightRow row(uint32_t peer, uint64_t seq, FlightState st, OpKind kind = OpKind::all_reduce) {
  FlightRow r;
  r.peer = r.rank = peer;
  r.op.seq = seq;
  r.op.kind = kind;
  r.has_data = true;
  r.shape = {4};
  r.state = st;
  r.enter_ns = 1000 * static_cast<int64_t>(seq + 1);
  if (st == FlightState::done || st == FlightState::failed) r.exit_ns = r.enter_ns + 500;
  return r;
}

FlightDump dump_of(std::vector<FlightRow> rows) {
  FlightDump d;
  d.written_ns = 1'000'000'000;
  d.rows = std::move(rows);
  return d;
}

// The root is recorded as the caller gave it, before the checks: one past every int is written,
// described and read back as that PeerId, not as a negative int.
TEST(FlightRecorder, ARootBeyondEveryIntIsRecordedAsGiven) {
  FlightRecorder r(1, 2, "/nonexistent");
  Tensor t = Tensor::zeros(DType::f32, {4});
  FlightOp o = op_of(0, 0, OpKind::broadcast, &t);
  o.op.root = static_cast<int>(UINT32_MAX);
  ASSERT_NE(r.begin(0, o), 0u);
  const auto rows = r.rows();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].describe(), "broadcast f32[4] root 4294967295");
  const std::string file = write_flight_dump(dump_of(rows));
  EXPECT_NE(file.find(" root=4294967295 "), std::string::npos) << file;
  auto back = parse_flight_dump(file);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  ASSERT_EQ(back->rows.size(), 1u);
  EXPECT_EQ(back->rows[0].describe(), "broadcast f32[4] root 4294967295");
  EXPECT_TRUE(back->rows[0].same_call(rows[0]));
}

TEST(FlightReport, NamesTheRankThatDidNotCall) {
  // Two processes: ranks 0-1 reached #2; rank 2 is still in #1.
  std::vector<FlightDump> dumps{
      dump_of({row(0, 1, FlightState::done), row(0, 2, FlightState::waiting), row(1, 1, FlightState::done),
               row(1, 2, FlightState::waiting)}),
      dump_of({row(2, 0, FlightState::done), row(2, 1, FlightState::running)})};
  const std::string d = first_divergence(dumps);
  EXPECT_NE(d.find("group 0 #2 all_reduce f32[4] sum: ranks 0-1 called it, rank 2 did not; rank 2's last op: #1 "
                   "all_reduce f32[4] sum, running for"),
            std::string::npos)
      << d;
  const std::string report = flight_report(dumps);
  EXPECT_NE(report.find("first divergence: group 0 #2"), std::string::npos) << report;
  EXPECT_NE(report.find("rank 2"), std::string::npos) << report;
}

// Rank 2 recorded no op at all (it never called one, or its process's recorder is not read):
// ranks 0-1 failed in #0 waiting for it. The dump's world (3 peers) makes it a rank of group 0
// all the same, so the divergence and the table name it; a file without a world (an older one)
// can only say who failed.
TEST(FlightReport, NamesARankThatRecordedNoOp) {
  FlightRow a = row(0, 0, FlightState::failed), b = row(1, 0, FlightState::failed);
  a.error = b.error = "timeout: all_reduce #0: peer 2 never called within 300 ms";
  FlightDump d = dump_of({a, b});
  d.world = 3;
  EXPECT_EQ(first_divergence({d}), "group 0 #0 all_reduce f32[4] sum: ranks 0-1 called it, rank 2 did not; rank 2: no op "
                                   "in these recorders (ranks 0-1 failed: " + a.error + ")");
  const std::string report = flight_report({d});
  EXPECT_NE(report.find("group 0 (ranks 0-2)\n"), std::string::npos) << report;
  EXPECT_NE(report.find(" rank 2\n0        all_reduce f32[4] sum        failed 0us       failed 0us       -\n"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("first divergence: group 0 #0 all_reduce f32[4] sum: ranks 0-1 called it, rank 2 did not"),
            std::string::npos)
      << report;
  d.world = -1;
  EXPECT_EQ(first_divergence({d}), "group 0 #0 all_reduce f32[4] sum failed on ranks 0-1: " + a.error);
}

TEST(FlightReport, NamesACallThatDiffersAndAFailure) {
  FlightRow other = row(1, 3, FlightState::waiting, OpKind::broadcast);
  std::vector<FlightDump> differ{dump_of({row(0, 3, FlightState::waiting), other, row(2, 3, FlightState::waiting)})};
  EXPECT_EQ(first_divergence(differ),
            "group 0 #3 differs: ranks 0,2 called all_reduce f32[4] sum, rank 1 called broadcast f32[4] root 0");
  FlightRow failed = row(1, 4, FlightState::failed);
  failed.error = "timeout: all_reduce #4: peers 3 never called";
  std::vector<FlightDump> fail{dump_of({row(0, 4, FlightState::done), failed})};
  EXPECT_EQ(first_divergence(fail), "group 0 #4 all_reduce f32[4] sum failed on rank 1: " + failed.error);
}

TEST(FlightReport, RanksThatAgreeAreSummedUpByOp) {
  std::vector<FlightDump> dumps{dump_of({row(0, 5, FlightState::done), row(0, 6, FlightState::running),
                                         row(1, 5, FlightState::done), row(1, 6, FlightState::running)}),
                                dump_of({row(2, 6, FlightState::running), row(3, 6, FlightState::running)})};
  EXPECT_EQ(first_divergence(dumps), "") << "rank 2-3's recorders forgot #5: only #6 is compared";
  const std::string w = where_ranks_stand(dumps);
  EXPECT_EQ(w.rfind("ranks 0-3: group 0 #6 all_reduce f32[4] sum, running for", 0), 0u) << w;
  EXPECT_EQ(rank_list({7, 0, 1, 2, 5, 8}), "0-2,5,7-8");
}

// End to end: peer 2 stops after op #0; peers 0 and 1 time out in #1. The failure writes the
// recorder on its own; read back, it names #1 and rank 2.
TEST(FlightRecorder, ATimeoutWritesTheRecorderNamingTheOpAndTheMissingRank) {
  Runtime rt;
  Config cfg = config_for(3, "auto", 300);
  std::vector<std::thread> threads;
  std::vector<Status> second(3);
  for (uint32_t p = 0; p < 3; ++p)
    threads.emplace_back([&, p] {
      auto peer = rt.register_peer(p, cfg);
      ASSERT_TRUE(peer.is_ok()) << peer.status().to_string();
      Tensor t = Tensor::from(std::vector<float>{1, 2, 3, 4});
      EXPECT_TRUE(peer->all_reduce(t, ReduceOp::sum).is_ok());
      if (p != 2) second[p] = peer->all_reduce(t, ReduceOp::sum);
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(second[0].code(), Errc::timeout);
  auto& flight = RuntimeAccess::impl(rt).flight;
  ASSERT_TRUE(flight);
  auto d = parse_flight_dump(read_file(flight->path()));
  ASSERT_TRUE(d.is_ok()) << flight->path() << ": " << d.status().to_string();
  EXPECT_NE(d->reason.find("all_reduce f32[4] sum #1 failed at rank"), std::string::npos) << d->reason;
  EXPECT_NE(d->reason.find("timeout"), std::string::npos) << d->reason;
  const std::string div = first_divergence({*d});
  EXPECT_NE(div.find("group 0 #1 all_reduce f32[4] sum: ranks 0-1 called it, rank 2 did not; rank 2's last op: #0"),
            std::string::npos)
      << div;
  if (!std::getenv("KEEP")) std::remove(flight->path().c_str());
}

// End to end: peer 2 registers and never calls; peers 0 and 1 time out in #0. The recorder knows
// the job's 3 peers, so its report names rank 2 though no row of it exists.
TEST(FlightRecorder, ATimeoutNamesARankThatNeverCalledAnyOp) {
  Runtime rt;
  Config cfg = config_for(3, "auto", 300);
  std::vector<std::thread> threads;
  std::vector<Status> first(3);
  for (uint32_t p = 0; p < 3; ++p)
    threads.emplace_back([&, p] {
      auto peer = rt.register_peer(p, cfg);
      ASSERT_TRUE(peer.is_ok()) << peer.status().to_string();
      Tensor t = Tensor::from(std::vector<float>{1, 2, 3, 4});
      if (p != 2) first[p] = peer->all_reduce(t, ReduceOp::sum);
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(first[0].code(), Errc::timeout);
  auto& flight = RuntimeAccess::impl(rt).flight;
  ASSERT_TRUE(flight);
  auto d = parse_flight_dump(read_file(flight->path()));
  ASSERT_TRUE(d.is_ok()) << flight->path() << ": " << d.status().to_string();
  EXPECT_EQ(d->world, 3);
  const std::string div = first_divergence({*d});
  // (Who failed depends on which peer's failure wrote the dump first.)
  EXPECT_EQ(div.rfind("group 0 #0 all_reduce f32[4] sum: ranks 0-1 called it, rank 2 did not; rank 2: no op in these "
                      "recorders (",
                      0),
            0u)
      << div;
  EXPECT_NE(div.find("timeout: all_reduce #0: peer 2 never called"), std::string::npos) << div;
  if (!std::getenv("KEEP")) std::remove(flight->path().c_str());
}

// A peer's calls may overlap: two sends from two threads of peer 0, both in flight before the
// receiver takes either. Each is noted and ended as its own op (the ticket was once kept per
// peer: the second send's entry replaced the first's, and one of them stayed "running").
TEST(FlightRecorder, OverlappingCallsOfOnePeerAreEachEnded) {
  Runtime rt;
  testing::EventCount entered;
  testing::count_server_entries(rt, entered);
  std::vector<Status> sent(2), got(2);
  harness::run_peers(rt, config_for(2), [&](Peer& peer) {
    if (peer.id() == 0) {
      std::thread t1([&] { sent[0] = peer.send(Tensor::from(std::vector<float>{1, 2}), 1, 1); });
      std::thread t2([&] { sent[1] = peer.send(Tensor::from(std::vector<int32_t>{3, 4, 5}), 1, 2); });
      t1.join();
      t2.join();
    } else {
      if (!entered.wait_for(2)) return;  // both sends in flight
      Tensor b = Tensor::zeros(DType::i32, {3}), a = Tensor::zeros(DType::f32, {2});
      got[1] = peer.recv(b, 0, 2);
      got[0] = peer.recv(a, 0, 1);
    }
  });
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(sent[i].is_ok()) << sent[i].to_string();
    ASSERT_TRUE(got[i].is_ok()) << got[i].to_string();
  }
  auto& flight = RuntimeAccess::impl(rt).flight;
  ASSERT_TRUE(flight);
  std::vector<FlightRow> sends;
  for (const auto& r : flight->rows())
    if (r.peer == 0 && r.op.kind == OpKind::send) sends.push_back(r);
  ASSERT_EQ(sends.size(), 2u);
  for (const auto& r : sends) {
    EXPECT_EQ(r.state, FlightState::done) << "tag " << r.tag;
    EXPECT_EQ(r.strategy, "p2p") << "tag " << r.tag;
    EXPECT_GT(r.exit_ns, 0) << "tag " << r.tag;
  }
  EXPECT_NE(sends[0].tag, sends[1].tag);
  EXPECT_EQ(sends[0].bytes + sends[1].bytes, 8u + 12u);
}

TEST(FlightRecorder, NoneWhenTurnedOffAndABadSizeIsAConfigError) {
  Config cfg = config_for(1);
  cfg.flight_recorder = 0;
  if (!std::getenv("CHORUS_FLIGHT_RECORDER")) {
    Runtime rt;
    ASSERT_TRUE(rt.register_peer(0, cfg).is_ok());
    EXPECT_FALSE(RuntimeAccess::impl(rt).flight) << "0 ops: no recorder";
  }
  cfg.flight_recorder = Config::kMaxFlightRecorder + 1;
  EXPECT_EQ(cfg.validate().code(), Errc::invalid_config);
  // The environment is held to the same bound, and must be a number.
  const char* before = std::getenv("CHORUS_FLIGHT_RECORDER");
  const std::string saved = before ? before : "";
  for (const char* bad : {"lots", "12x", "1048577"}) {
    setenv("CHORUS_FLIGHT_RECORDER", bad, 1);
    Runtime rt;
    auto p = rt.register_peer(0, config_for(1));
    ASSERT_FALSE(p.is_ok()) << bad;
    EXPECT_EQ(p.status().code(), Errc::invalid_config) << bad;
    EXPECT_NE(p.status().message().find("CHORUS_FLIGHT_RECORDER='" + std::string(bad) + "'"), std::string::npos)
        << p.status().message();
  }
  if (before) setenv("CHORUS_FLIGHT_RECORDER", saved.c_str(), 1);
  else unsetenv("CHORUS_FLIGHT_RECORDER");
}

TEST(FlightRecorder, SigusrOneWritesEveryRecorderOfTheProcess) {
  Runtime rt;
  auto p = rt.register_peer(0, config_for(1));
  ASSERT_TRUE(p.is_ok());
  Tensor t = Tensor::from(std::vector<int32_t>{7});
  ASSERT_TRUE(p->broadcast(t, 0).is_ok());
  auto& flight = RuntimeAccess::impl(rt).flight;
  ASSERT_TRUE(flight);
  std::remove(flight->path().c_str());
  WaitWord written;
  std::string path;
  set_dump_signal_hook([&](const std::string& w) {
    if (w != flight->path()) return;  // another test's runtime may still be alive
    path = w;
    written.set(1);
  });
  ASSERT_EQ(::raise(SIGUSR1), 0);
  ASSERT_TRUE(written.wait_at_least(1, Clock::now() + std::chrono::seconds(10)));
  set_dump_signal_hook({});
  auto d = parse_flight_dump(read_file(path));
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  EXPECT_EQ(d->reason, "SIGUSR1");
  ASSERT_EQ(d->rows.size(), 1u);
  EXPECT_EQ(d->rows[0].describe(), "broadcast i32[1] root 0");
  EXPECT_EQ(d->rows[0].state, FlightState::done);
  std::remove(path.c_str());
}

} // namespace
} // namespace chorus
