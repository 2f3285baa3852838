// A GoogleTest fixture over CAF 0.17's deterministic scheduler (caf::scheduler::test_coordinator):
// nothing runs until the test says so, timers fire when the test moves the clock, and the test can
// look at the next message before it is delivered. Used by the message-level tests of the actors
// production spawns (orchestrator, node actor, local server).
#pragma once
#include <gtest/gtest.h>

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include <cstddef>

#include "messages/envelope.hpp"

namespace chorus::testing {

class CafDeterministic : public ::testing::Test {
 protected:
  struct SystemConfig : caf::actor_system_config {
    SystemConfig() {
      set("scheduler.policy", caf::atom("testing"));
      set("logger.verbosity", caf::atom("quiet"));
      add_message_type<Envelope>("chorus::envelope");
    }
  };

  SystemConfig sys_cfg;
  caf::actor_system sys{sys_cfg};
  caf::scheduler::test_coordinator& sched = dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  caf::scoped_actor self{sys, true};  // hidden: the test's own mailbox

  // Runs what is left, letting every pending request time out, so no actor outlives the system
  // (its destructor waits for them all).
  ~CafDeterministic() override {
    for (int i = 0; i < 1000 && (run_jobs() > 0 || sched.trigger_timeouts() > 0); ++i) {
    }
  }

  // Runs every queued job until none is left; never fires a timer.
  std::size_t run_jobs() {
    std::size_t n = 0;
    while (sched.try_run_once()) ++n;
    return n;
  }
  // Fires the next pending timer (the clock jumps to it), then runs what it caused.
  bool fire_next_timer() {
    if (!sched.trigger_timeout()) return false;
    run_jobs();
    return true;
  }
};

} // namespace chorus::testing
