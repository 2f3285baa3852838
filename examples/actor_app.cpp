// A host app whose workers are themselves actors: each worker asks its peer actor for an
// all-reduce with `request` and continues in the response handler, never blocking a thread.
#include <atomic>
#include <cstdio>

#include <chorus/chorus.hpp>
#include <chorus/peer_actor.hpp>

using namespace chorus;

namespace {

caf::behavior worker(caf::event_based_actor* self, peer_actor peer, uint32_t id, std::atomic<int>* ok) {
  Tensor t = Tensor::from(std::vector<int32_t>(8, int32_t(id + 1)));
  self->request(peer, std::chrono::seconds(10), OpCall::all_reduce(t, t, ReduceOp::sum))
      .then(
          [=](const OpDone& done) {
            int32_t v = done.output.data_as<int32_t>()[7];
            std::printf("worker %u: %s, sum %d\n", id, done.status().to_string().c_str(), v);
            if (done.status().is_ok() && v == 3) ++*ok;
            self->quit();
          },
          [=](caf::error& e) {
            std::printf("worker %u: %s\n", id, to_string(e).c_str());
            self->quit();
          });
  return {};
}

} // namespace

int main() {
  Runtime runtime;
  Config config;
  config.num_devices = 2;
  config.timeout = std::chrono::seconds(10);
  std::atomic<int> ok{0};
  {
    caf::scoped_actor waiter{actor_system_of(runtime)};
    for (uint32_t id = 0; id < 2; ++id) {
      auto peer = spawn_peer_actor(runtime, id, config);
      if (!peer) { std::fprintf(stderr, "%s\n", peer.status().to_string().c_str()); return 1; }
      auto w = actor_system_of(runtime).spawn(worker, *peer, id, &ok);
      waiter->monitor(w);
    }
    for (int i = 0; i < 2; ++i) waiter->receive([](caf::down_msg&) {});
  }
  std::printf("%s\n", ok == 2 ? "actor app: all collectives correct" : "actor app: FAILED");
  return ok == 2 ? 0 : 1;
}
