// A host app with four device threads, one peer each: the shape of a data-parallel job on one
// machine. Each thread registers, averages its "gradients" with everyone else's, receives a
// broadcast configuration from peer 0, gathers per-peer statistics, and leaves.
#include <cstdio>
#include <thread>
#include <vector>

#include <chorus/chorus.hpp>

int main() {
  using namespace chorus;
  constexpr uint32_t peers = 4;
  Runtime runtime;
  Config config;
  config.num_devices = peers;
  config.timeout = std::chrono::seconds(10);

  std::vector<int> failures(peers, 0);
  std::vector<std::thread> threads;
  for (uint32_t id = 0; id < peers; ++id) {
    threads.emplace_back([&, id] {
      auto peer = runtime.register_peer(id, config);
      if (!peer) { std::fprintf(stderr, "register: %s\n", peer.status().to_string().c_str()); failures[id]++; return; }

      // 1. Average a gradient: peer p contributes p+1 everywhere, so the mean is 2.5.
      Tensor grad = Tensor::from(std::vector<float>(1 << 20, float(id + 1)));
      if (auto s = peer->all_reduce(grad, ReduceOp::avg); !s || grad.data_as<float>()[12345] != 2.5f) {
        std::fprintf(stderr, "peer %u all_reduce: %s\n", id, s.to_string().c_str());
        failures[id]++;
      }
      // 2. Peer 0 decides a learning rate; the others receive it (by-data broadcast).
      std::optional<Tensor> lr;
      if (id == 0) lr = Tensor::from(std::vector<double>{0.01});
      auto got = peer->broadcast(lr);  // a Result: read its value only when it has one
      double lr_value = 0;
      if (!got) {
        std::fprintf(stderr, "peer %u broadcast: %s\n", id, got.status().to_string().c_str());
        failures[id]++;
      } else if ((lr_value = got->data_as<double>()[0]) != 0.01) {
        failures[id]++;
      }
      // 3. Everyone learns everyone's step count.
      Tensor mine = Tensor::from(std::vector<int64_t>{int64_t(100 + id)});
      Tensor all = Tensor::zeros(DType::i64, {peers});
      if (auto s = peer->all_gather(mine, all); !s || all.data_as<int64_t>()[3] != 103) failures[id]++;
      if (id == 0)
        std::printf("peer 0: mean gradient %.2f, lr %.3f, steps %lld %lld %lld %lld\n",
                    grad.data_as<float>()[0], lr_value,
                    (long long)all.data_as<int64_t>()[0], (long long)all.data_as<int64_t>()[1],
                    (long long)all.data_as<int64_t>()[2], (long long)all.data_as<int64_t>()[3]);
      if (!peer->finish()) failures[id]++;
    });
  }
  for (auto& t : threads) t.join();
  int bad = 0;
  for (int f : failures) bad += f;
  std::printf("%s\n", bad ? "host app: FAILED" : "host app: all collectives correct");
  return bad ? 1 : 0;
}
