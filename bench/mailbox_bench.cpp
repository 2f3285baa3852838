// chorus-mailbox-bench: why the data path does not go through actor mailboxes. Measures, on this
// machine, one request and its answer between a host thread (a peer) and the one that serves it:
//   - through CAF mailboxes, as a control message travels (a scoped actor requesting from an
//     event-based actor, and from a detached actor, under the scheduler policy the runtime uses);
//   - directly, as an op request travels: the caller enters the server's code on its own thread
//     and waits on a word (core/wait.hpp) that another thread sets (spin, then futex).
// Prints the median and the 90th percentile of each, in microseconds.
// usage: chorus-mailbox-bench [-n ITERS] [--policy sharing|stealing]
#include <caf/all.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/wait.hpp"

using namespace chorus;
using ping_atom = caf::atom_constant<caf::atom("ping")>;

namespace {

struct Figures {
  double median_us, p90_us;
};

Figures summarize(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us[us.size() * 9 / 10]};
}

template <class RoundTrip>
Figures time_round_trips(int iters, RoundTrip once) {
  for (int i = 0; i < iters / 10; ++i) once();  // warm up: threads awake, caches filled
  std::vector<double> us;
  us.reserve(static_cast<std::size_t>(iters));
  for (int i = 0; i < iters; ++i) {
    auto t0 = Clock::now();
    once();
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  return summarize(std::move(us));
}

caf::behavior echo(caf::event_based_actor*) {
  return {[](ping_atom, uint64_t x) { return x + 1; }};
}

// A host thread asks an actor and waits for the answer, as a blocking API over a mailbox would.
Figures mailbox(caf::actor_system& sys, const caf::actor& server, int iters) {
  caf::scoped_actor self{sys};
  uint64_t x = 0;
  return time_round_trips(iters, [&] {
    self->request(server, std::chrono::seconds(10), ping_atom::value, x)
        .receive([&](uint64_t y) { x = y; }, [&](caf::error& e) {
          std::fprintf(stderr, "request failed: %s\n", sys.render(e).c_str());
          std::exit(1);
        });
  });
}

// Waits for w >= target: as peers do (spin up to `spin`, then sleep on the futex), or, with
// `at_once`, asleep on the futex from the start (the cost of a wake-up across threads).
bool await_word(WaitWord& w, uint32_t target, Clock::time_point deadline, std::chrono::nanoseconds spin, bool at_once) {
  if (!at_once) return w.wait_at_least(target, deadline, spin);
  for (;;) {
    const uint32_t v = w.value.load();
    if (v >= target) return true;
    if (Clock::now() >= deadline) return false;
    w.sleep(v, deadline);
  }
}

// The direct path: the request is handed over in memory and the answer comes back through a word
// the caller waits on, which is how a peer thread meets the local server's reply and the other
// peers of an op.
Figures direct(int iters, std::chrono::nanoseconds spin, bool at_once) {
  WaitWord ask, answer;
  std::atomic<bool> stop{false};
  std::thread server([&] {
    for (uint32_t k = 1;; ++k) {
      while (!await_word(ask, k, Clock::now() + std::chrono::seconds(1), spin, at_once))
        if (stop.load()) return;
      if (stop.load()) return;
      answer.set(k);
    }
  });
  uint32_t k = 0;
  auto f = time_round_trips(iters, [&] {
    ++k;
    ask.set(k);
    await_word(answer, k, Clock::now() + std::chrono::seconds(10), spin, at_once);
  });
  stop = true;
  ask.set(k + 1);
  server.join();
  return f;
}

} // namespace

int main(int argc, char** argv) {
  int iters = 20000;
  std::string policy = "sharing";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "-n") && i + 1 < argc) iters = std::max(100, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--policy") && i + 1 < argc) policy = argv[++i];
    else policy = "?";
    if (policy != "sharing" && policy != "stealing") {
      std::fprintf(stderr, "usage: %s [-n ITERS] [--policy sharing|stealing]\n", argv[0]);
      return 2;
    }
  }
  caf::actor_system_config cfg;
  cfg.set("scheduler.policy", policy == "stealing" ? caf::atom("stealing") : caf::atom("sharing"));
  cfg.set("scheduler.max-threads", 2);  // as the runtime sets it (runtime/runtime.cpp)
  cfg.set("logger.verbosity", caf::atom("quiet"));
  caf::actor_system sys{cfg};
  auto event_based = sys.spawn(echo);
  auto detached = sys.spawn<caf::detached>(echo);

  std::printf("# chorus-mailbox-bench: %d round trips each, scheduler policy %s, %u hardware threads\n", iters,
              policy.c_str(), hardware_threads());
  std::printf("# %-58s %12s %12s\n", "path", "median(us)", "p90(us)");
  auto row = [](const char* what, Figures f) { std::printf("  %-58s %12.2f %12.2f\n", what, f.median_us, f.p90_us); };
  row("mailbox: host thread -> event-based actor -> back", mailbox(sys, event_based, iters));
  row("mailbox: host thread -> detached actor -> back", mailbox(sys, detached, iters));
  row("direct: word set, other thread answers (spin, then futex)", direct(iters, spin_budget_for(2), false));
  row("direct: word set, other thread answers (futex at once)", direct(iters, std::chrono::nanoseconds(0), true));
  caf::anon_send_exit(event_based, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(detached, caf::exit_reason::user_shutdown);
  return 0;
}
