// A process of a job started by a launcher: chorus-run, mpirun, srun or torchrun (or none: then
// one process). Config::from_env reads what the launcher set: this process's rank, the job's size,
// where the orchestrator is (rank 0 hosts it when the launcher names none). The process hosts
// CHORUS_PEERS peer threads (default 1); every peer of every process all-reduces its rank,
// broadcasts from the last rank, and checks the results.
//
//   build/bin/chorus-run -n 2 --peers 2 build/bin/chorus-node-example
//   mpirun -n 4 build/bin/chorus-node-example
//   torchrun --no_python --nproc_per_node 4 build/bin/chorus-node-example
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <chorus/chorus.hpp>

int main() {
  auto env = chorus::Config::from_env();
  if (!env) {
    std::fprintf(stderr, "chorus-node-example: %s\n", env.status().to_string().c_str());
    return 2;
  }
  const chorus::Config cfg = *env;
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
