// GPU tensors: four peer threads whose gradients live in GPU memory. With one GPU they are logical
// peers sharing it (one fused on-device pass per all-reduce); with several, peer p uses GPU
// p mod count (through NCCL when that puts every peer on its own GPU, i.e. 4 or more GPUs; through
// the on-device plan otherwise). Without a GPU it says so and exits 0.
#include <cstdio>
#include <thread>
#include <vector>

#include <chorus/chorus.hpp>
#include <chorus/gpu.hpp>

int main() {
  using namespace chorus;
  const int gpus = gpu::device_count();
  if (gpus == 0) {
    std::printf("gpu app: no CUDA device here%s; nothing to do\n", gpu::built_with_cuda() ? "" : " (built without CUDA)");
    return 0;
  }
  constexpr uint32_t peers = 4;
  constexpr std::size_t n = 1 << 22;
  Runtime runtime;
  Config config;
  config.num_devices = peers;
  config.timeout = std::chrono::seconds(30);
  std::vector<int> failures(peers, 0);
  std::vector<std::thread> threads;
  for (uint32_t id = 0; id < peers; ++id)
    threads.emplace_back([&, id] {
      auto peer = runtime.register_peer(id, config);
      if (!peer) { std::fprintf(stderr, "register: %s\n", peer.status().to_string().c_str()); failures[id]++; return; }
      const Device dev = Device::cuda(static_cast<int>(id) % gpus);
      try {
        // Peer p's gradient is p+1 everywhere: the mean over 4 peers is 2.5.
        Tensor grad = Tensor::from(std::vector<float>(n, float(id + 1))).to(dev);
        if (auto s = peer->all_reduce(grad, ReduceOp::avg); !s) {
          std::fprintf(stderr, "peer %u all_reduce: %s\n", id, s.to_string().c_str());
          failures[id]++;
        } else if (grad.to_vector<float>()[n - 1] != 2.5f) {
          failures[id]++;
        }
        // Every peer's shard, gathered on every GPU.
        Tensor mine = Tensor::from(std::vector<int32_t>(8, int32_t(id))).to(dev);
        Tensor all = Tensor::zeros(DType::i32, {peers * 8}, dev);
        if (auto s = peer->all_gather(mine, all); !s || all.to_vector<int32_t>()[3 * 8] != 3) failures[id]++;
        if (id == 0) std::printf("peer 0 on %s: mean gradient %.2f\n", dev.str().c_str(), grad.to_vector<float>()[0]);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "peer %u: %s\n", id, e.what());
        failures[id]++;
      }
      if (!peer->finish()) failures[id]++;
    });
  for (auto& t : threads) t.join();
  int bad = 0;
  for (int f : failures) bad += f;
  std::printf("%s\n", bad ? "gpu app: FAILED" : "gpu app: all collectives correct");
  return bad ? 1 : 0;
}
