// A host app whose workers are themselves actors, in the host's own actor system: each worker asks
// its peer actor for an all-reduce and then an object all-gather with `request`, continuing in the
// response handlers, never blocking a thread. Spawning a peer actor returns at once; the actor
// registers on its own thread and answers requests sent meanwhile once it has.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>

#include <chorus/chorus.hpp>
#include <chorus/caf.hpp>

using namespace chorus;
using namespace std::chrono_literals;

namespace {

constexpr uint32_t kPeers = 2;

caf::behavior worker(caf::event_based_actor* self, peer_actor peer, uint32_t id, std::atomic<int>* ok) {
  auto fail = [=](caf::error& e) {
    std::printf("worker %u: %s\n", id, to_string(e).c_str());
    self->quit();
  };
  Tensor t = Tensor::from(std::vector<int32_t>(8, int32_t(id + 1)));
  self->request(peer, 10s, OpCall::all_reduce(t, t, ReduceOp::sum)).then(
      [=](const OpDone& sum) {
        const int32_t v = sum.output.data_as<int32_t>()[7];
        std::printf("worker %u: all_reduce %s, sum %d\n", id, sum.status().to_string().c_str(), v);
        self->request(peer, 10s, ObjectCall::all_gather("worker " + std::to_string(id))).then(
            [=](const ObjectDone& names) {
              const bool names_ok = names.status().is_ok() && names.objects.size() == kPeers &&
                                    names.objects[0] == "worker 0" && names.objects[1] == "worker 1";
              std::printf("worker %u: all_gather_object %s, %zu names\n", id, names.status().to_string().c_str(),
                          names.objects.size());
              if (sum.status().is_ok() && v == 3 && names_ok) ++*ok;
              self->send_exit(peer, caf::exit_reason::user_shutdown);  // the peer actor finishes its peer
              self->quit();
            },
            fail);
      },
      fail);
  return {};
}

} // namespace

int main() {
  caf::actor_system_config cfg;
  caf::actor_system system{cfg};  // the host app's own actor system
  Runtime runtime{host_system(system)};  // chorus runs in it (declared after it: destroyed before it)
  Config config;
  config.num_devices = kPeers;
  config.timeout = 10s;
  std::atomic<int> ok{0};
  {
    caf::scoped_actor waiter{system};
    for (uint32_t id = 0; id < kPeers; ++id) {
      peer_actor peer = spawn_peer_actor(runtime, id, config);  // returns at once
      waiter->monitor(system.spawn(worker, peer, id, &ok));
    }
    for (uint32_t i = 0; i < kPeers; ++i) waiter->receive([](caf::down_msg&) {});
  }
  std::printf("%s\n", ok == kPeers ? "actor app: all collectives correct" : "actor app: FAILED");
  return ok == kPeers ? 0 : 1;
}
