// A node of a multi-node job: start chorus-orchestrator once, then this program once per node
// (on one machine or several). Each node hosts `peers` peer threads; every peer of every node
// all-reduces its rank, broadcasts from the last rank, and checks the results.
//
//   build/bin/chorus-orchestrator --port 7000 --nodes 2 &
//   build/bin/chorus-node-example 127.0.0.1:7000 2 127.0.0.1 2 &
//   build/bin/chorus-node-example 127.0.0.1:7000 2 127.0.0.1 2
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <chorus/chorus.hpp>

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s ORCHESTRATOR_HOST:PORT NUM_NODES THIS_NODE_ADDRESS LOCAL_PEERS\n", argv[0]);
    return 2;
  }
  chorus::Config cfg;
  cfg.orchestrator_address = argv[1];
  cfg.num_nodes = static_cast<uint32_t>(std::atoi(argv[2]));
  cfg.node_address = argv[3];
  cfg.num_devices = static_cast<uint32_t>(std::atoi(argv[4]));
  if (cfg.num_nodes == 0 || cfg.num_devices == 0) {
    std::fprintf(stderr, "%s: NUM_NODES and LOCAL_PEERS must be positive numbers\n", argv[0]);
    return 2;
  }
  if (const char* s = std::getenv("CHORUS_SECRET")) cfg.secret = s;
  cfg.timeout = std::chrono::seconds(30);

  chorus::Runtime rt;
  std::vector<int> ok(cfg.num_devices, 0);
  std::vector<std::thread> threads;
  for (uint32_t id = 0; id < cfg.num_devices; ++id)
    threads.emplace_back([&, id] {
      auto peer = rt.register_peer(id, cfg);  // waits for every node of the job
      if (!peer) {
        std::fprintf(stderr, "register: %s\n", peer.status().to_string().c_str());
        return;
      }
      const uint32_t n = peer->size(), me = peer->rank();
      // Sum of all ranks, everywhere.
      auto x = chorus::Tensor::from(std::vector<float>(1000, static_cast<float>(me)));
      if (auto s = peer->all_reduce(x, chorus::ReduceOp::sum); !s) {
        std::fprintf(stderr, "rank %u: %s\n", me, s.to_string().c_str());
        return;
      }
      const float want = static_cast<float>(n) * static_cast<float>(n - 1) / 2;
      // The last rank's data, everywhere.
      auto y = chorus::Tensor::from(std::vector<float>(10, me == n - 1 ? 42.0f : 0.0f));
      if (auto s = peer->broadcast(y, n - 1); !s) {
        std::fprintf(stderr, "rank %u: %s\n", me, s.to_string().c_str());
        return;
      }
      bool good = x.data_as<float>()[999] == want && y.data_as<float>()[9] == 42.0f;
      std::printf("rank %u of %u: all_reduce %s, broadcast %s\n", me, n, good ? "ok" : "WRONG",
                  y.data_as<float>()[9] == 42.0f ? "ok" : "WRONG");
      ok[id] = good;
      (void)peer->finish();
    });
  for (auto& t : threads) t.join();
  for (int v : ok)
    if (!v) return 1;
  return 0;
}
