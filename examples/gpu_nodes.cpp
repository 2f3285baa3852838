// One node process per GPU, the usual GPU deployment (as torchrun or mpirun start it): every process
// is a node of one job with one peer, whose tensors live on its own GPU; auto (the default) runs
// every op on one NCCL communicator spanning all the processes, so GPU data never goes through
// host memory. The unique id NCCL needs travels through chorus's own control plane: no MPI, no
// shared file system. Start chorus-orchestrator once, then this program once per GPU (on one
// machine or several), each with the index of its GPU on its machine:
//
//   build/bin/chorus-orchestrator --port 7000 --nodes 2 &
//   build/bin/chorus-gpu-nodes-example 127.0.0.1:7000 2 127.0.0.1 0 &
//   build/bin/chorus-gpu-nodes-example 127.0.0.1:7000 2 127.0.0.1 1
//
// NCCL refuses two ranks on one GPU; processes of one machine that share a GPU (give two of them
// the same LOCAL_GPU) run their ops through CUDA IPC instead: one process runs the op over every
// process's buffers.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <chorus/chorus.hpp>
#include <chorus/gpu.hpp>

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s ORCHESTRATOR_HOST:PORT NUM_NODES THIS_NODE_ADDRESS LOCAL_GPU\n", argv[0]);
    return 2;
  }
  chorus::Config cfg;
  cfg.orchestrator_address = argv[1];
  cfg.num_nodes = static_cast<uint32_t>(std::atoi(argv[2]));
  cfg.node_address = argv[3];
  cfg.num_devices = 1;  // one peer per process: its GPU
  const int gpu = std::atoi(argv[4]);
  if (cfg.num_nodes == 0 || gpu < 0) {
    std::fprintf(stderr, "%s: NUM_NODES must be positive and LOCAL_GPU a GPU index\n", argv[0]);
    return 2;
  }
  if (const char* s = std::getenv("CHORUS_SECRET")) cfg.secret = s;
  cfg.timeout = std::chrono::seconds(60);  // the first op also sets NCCL's communicator up
  // auto (the default): NCCL where every node has a GPU of its own, CUDA IPC where processes share one.

  chorus::Runtime rt;
  auto peer = rt.register_peer(0, cfg);  // waits for every node of the job
  if (!peer) {
    std::fprintf(stderr, "register: %s\n", peer.status().to_string().c_str());
    return 1;
  }
  const uint32_t n = peer->size(), me = peer->rank();
  // Gradients on this process's GPU: every rank's value, averaged over the job.
  if (gpu >= chorus::gpu::device_count()) {
    std::fprintf(stderr, "rank %u: no cuda:%d here (%s)\n", me, gpu, chorus::gpu::device_name(gpu).c_str());
    (void)peer->finish();  // the other processes' ops then fail, saying that this node left
    return 1;
  }
  auto host = chorus::Tensor::from(std::vector<float>(1 << 20, static_cast<float>(me)));
  chorus::Tensor grads = host.to(chorus::Device::cuda(gpu));
  if (auto s = peer->all_reduce(grads, chorus::ReduceOp::avg); !s) {
    std::fprintf(stderr, "rank %u: %s\n", me, s.to_string().c_str());
    (void)peer->finish();
    return 1;
  }
  const float want = static_cast<float>(n - 1) / 2;
  const float got = grads.to(chorus::Device::cpu()).data_as<float>()[(1 << 20) - 1];
  std::printf("rank %u of %u on cuda:%d: all_reduce avg %s (through %s)\n", me, n, gpu, got == want ? "ok" : "WRONG",
              peer->last_strategy().c_str());
  (void)peer->finish();
  return got == want ? 0 : 1;
}
