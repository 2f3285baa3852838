// One node process of the orchestrator daemon tests (orchestrator_daemon_test.cpp): joins the daemon on
// 127.0.0.1:PORT as one of 3 nodes with 2 peers (secret "s3", BASP heartbeats every 100 ms),
// prints "joined as node <id> ", and stays a member until SIGTERM or 10 s (the tests freeze or
// kill it before), then leaves.
//   usage: chorus-test-orchestrator-node PORT
// Exit status: 0 after leaving, 1 when the join failed, 2 on bad usage.
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <ctime>
#include <iostream>
#include <string>

#include "actors/global_client/node_session.hpp"
#include "orchestrator_fixtures.hpp"

int main(int argc, char** argv) {
  using namespace chorus;
  const long port = argc == 2 ? std::strtol(argv[1], nullptr, 10) : 0;
  if (port <= 0 || port > 65535) {
    std::cerr << "usage: chorus-test-orchestrator-node PORT\n";
    return 2;
  }
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &term, nullptr);  // before CAF's threads start: sigtimedwait takes it

  caf::actor_system_config cfg;
  configure_remoting(cfg, std::chrono::milliseconds(100));
  caf::actor_system sys{cfg};
  const std::string address = "127.0.0.1:" + std::to_string(20000 + getpid() % 20000);
  auto r = NodeSession::join(sys, "127.0.0.1", static_cast<uint16_t>(port), testing::reg(3, 2, address),
                             std::chrono::milliseconds(3000));
  if (!r) {
    std::cerr << "join: " << r.status().to_string() << std::endl;
    return 1;
  }
  std::cout << "joined as node " << (*r)->topology().node_id << " " << std::endl;
  const timespec limit{10, 0};
  (void)sigtimedwait(&term, nullptr, &limit);
  (*r)->leave();
  return 0;
}
