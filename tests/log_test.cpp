// chorus's logging (core/log.hpp): levels and subsystems parsed as documented, nothing written at
// the default level, even for a failing op; at warn a failed op says which op of which rank and
// why, in one line with its fields, and half its timeout in, once, which ranks wait for which; at
// info a successful job says nothing from the op path; a bad level in Config is a config error
// naming the field.
#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <chorus/chorus.hpp>
#include "core/log.hpp"
#include "peer_harness.hpp"
#include "status_matchers.hpp"

namespace chorus {
namespace {

using harness::config_for;
using harness::run_peers;

// Collects the lines; restores stderr and the default level when done.
struct Captured {
  std::mutex mu;
  std::vector<std::string> lines;
  Captured() {
    set_log_sink([this](const std::string& l) {
      std::lock_guard<std::mutex> lk(mu);
      lines.push_back(l);
    });
  }
  ~Captured() {
    configure_log("none", "all");
    set_log_sink({});
  }
  std::vector<std::string> all() {
    std::lock_guard<std::mutex> lk(mu);
    return lines;
  }
};

TEST(Log, LevelsAndSubsystemsParseAsDocumented) {
  LogLevel l = LogLevel::trace;
  EXPECT_TRUE(parse_log_level("", l) && l == LogLevel::none);
  EXPECT_TRUE(parse_log_level("warn", l) && l == LogLevel::warn);
  EXPECT_TRUE(parse_log_level("trace", l) && l == LogLevel::trace);
  EXPECT_FALSE(parse_log_level("loud", l));
  uint32_t m = 0;
  EXPECT_TRUE(parse_log_subsys("net,shm", m));
  EXPECT_EQ(m, static_cast<uint32_t>(Subsys::net) | static_cast<uint32_t>(Subsys::shm));
  EXPECT_TRUE(parse_log_subsys("all", m) && m == 0xffffffffu);
  EXPECT_FALSE(parse_log_subsys("net,disk", m));
  EXPECT_NE(configure_log("loud", ""), "");
  Captured c;
  EXPECT_EQ(configure_log("info", "net,shm"), "");
  EXPECT_TRUE(log_on(LogLevel::info, Subsys::net));
  EXPECT_TRUE(log_on(LogLevel::warn, Subsys::shm));
  EXPECT_FALSE(log_on(LogLevel::trace, Subsys::net)) << "above the level";
  EXPECT_FALSE(log_on(LogLevel::info, Subsys::op)) << "a subsystem not asked for";
}

TEST(Log, OneLineWithTimeLevelSubsystemAndFields) {
  Captured c;
  configure_log("info", "");
  CHORUS_LOG(info, net, (LogWhere{2, 5, 0, 17}), "hello");
  CHORUS_LOG(trace, net, LogWhere{}, "not written");
  auto lines = c.all();
  ASSERT_EQ(lines.size(), 1u);
  const std::string& l = lines[0];
  EXPECT_EQ(l.rfind("chorus 20", 0), 0u) << l;  // the date
  EXPECT_NE(l.find("Z INFO net node 2 rank 5 group 0 op 17: hello"), std::string::npos) << l;
}

// A timeout: silent at the default level; at warn, what the op still waits for once half its
// timeout is gone, then the op that failed, by rank and sequence number, with the reason.
TEST(Log, AFailedOpIsSilentByDefaultAndNamesWhatItWaitsForAtWarn) {
  for (const char* level : {"", "warn"}) {
    Captured c;
    configure_log(level, "");
    Runtime rt;
    Config cfg = config_for(2, "auto", 200);
    auto p0 = rt.register_peer(0, cfg);
    ASSERT_TRUE(p0.is_ok()) << p0.status().to_string();
    Tensor t = Tensor::from(std::vector<float>{1, 2});
    const Status s = p0->all_reduce(t, ReduceOp::sum);  // peer 1 never comes
    EXPECT_EQ(s.code(), Errc::timeout);
    auto lines = c.all();
    if (std::string(level).empty()) {
      EXPECT_TRUE(lines.empty()) << lines[0];
      continue;
    }
    ASSERT_EQ(lines.size(), 3u);
    // Half the timeout gone: what the op waits for, once; then the failure itself.
    EXPECT_NE(lines[0].find("WARN op group 0 op 0: all_reduce #0: rank 0 waits for rank 1 (not called yet) after 100 "
                            "ms, half the op's timeout"),
              std::string::npos)
        << lines[0];
    // The failure wrote the flight recorder (and says where), then the op's own line.
    EXPECT_NE(lines[1].find("WARN op rank 0 group 0 op 0: flight recorder written to "), std::string::npos) << lines[1];
    EXPECT_NE(lines[1].find("chorus-flight-"), std::string::npos) << lines[1];
    EXPECT_NE(lines[2].find("WARN op rank 0 group 0 op 0: all_reduce failed: timeout"), std::string::npos) << lines[2];
  }
}

// Three peers wait for a fourth: half the timeout in, one line (not one per waiting peer) names
// the rank they wait for and the ranks that wait.
TEST(Log, TheHalfTimeoutWarningNamesTheMissingRankOnce) {
  Captured c;
  configure_log("warn", "op");
  Runtime rt;
  const Config cfg = config_for(4, "auto", 300);
  std::vector<Status> got(3);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < 3; ++r)  // rank 3 never comes
    threads.emplace_back([&, r] {
      auto p = rt.register_peer(r, cfg);
      ASSERT_TRUE(p.is_ok()) << p.status().to_string();
      Tensor t = Tensor::from(std::vector<float>{1, 2});
      got[r] = p->all_reduce(t, ReduceOp::sum);
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) EXPECT_EQ(got[r].code(), Errc::timeout) << got[r].to_string();
  std::vector<std::string> half;
  for (const auto& l : c.all())
    if (l.find("half the op's timeout") != std::string::npos) half.push_back(l);
  ASSERT_EQ(half.size(), 1u) << (half.empty() ? "" : half[0] + "\n" + half.back());
  EXPECT_NE(half[0].find("WARN op group 0 op 0: all_reduce #0: ranks 0-2 wait for rank 3 (not called yet) after 150 ms, "
                         "half the op's timeout"),
            std::string::npos)
      << half[0];
}

// A job that works says nothing on the op path, even at info.
TEST(Log, ASuccessfulJobSaysNothingAboutItsOps) {
  Captured c;
  configure_log("info", "op");
  Runtime rt;
  run_peers(rt, config_for(3), [](Peer& p) {
    Tensor t = Tensor::from(std::vector<int64_t>{1, 2});
    EXPECT_TRUE(p.all_reduce(t, ReduceOp::sum).is_ok());
  });
  EXPECT_TRUE(c.all().empty());
}

// At trace the local server says how it planned an op of a shape it had not planned before (what
// runs it and why, as chorus-bench --explain words it), once per shape: the later ops of the
// shape take the cached schedule and say nothing.
TEST(Log, AtTraceTheFirstOpOfAShapeSaysItsPlan) {
  Captured c;
  configure_log("trace", "op");
  Runtime rt;
  run_peers(rt, config_for(2), [](Peer& p) {
    for (int i = 0; i < 3; ++i) {
      Tensor t = Tensor::zeros(DType::f32, {1 << 18});  // 1 MiB: past the arena's slot, to the local server
      EXPECT_TRUE(p.all_reduce(t, ReduceOp::sum).is_ok());
    }
  });
  std::vector<std::string> plans;
  for (const auto& l : c.all())
    if (l.find("planned") != std::string::npos) plans.push_back(l);
  ASSERT_EQ(plans.size(), 1u) << (plans.empty() ? "none" : plans.back());
  EXPECT_NE(plans[0].find("TRACE op group 0 op 0: all_reduce #0: planned direct (2 rounds, 4 messages, the largest 524288 B): one process: 1048576 B >= "
                          "the threshold (262144 B)"),
            std::string::npos)
      << plans[0];
}

TEST(Log, ABadLevelInConfigIsAConfigError) {
  Config cfg = config_for(1);
  cfg.debug = "loud";
  EXPECT_TRUE(has(cfg.validate(), Errc::invalid_config, {"debug 'loud'"}));
  cfg.debug = "info";
  cfg.debug_subsys = "net,disk";
  EXPECT_TRUE(has(cfg.validate(), Errc::invalid_config, {"debug_subsys 'net,disk'"}));
}

} // namespace
} // namespace chorus
