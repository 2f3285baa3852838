// Built against an installed chorus (tests/install/check.sh): two peers all-reduce through the
// public API, non-blocking (a Work waited for), and check every value; exits non-zero when
// anything is wrong.
#include <chorus/chorus.hpp>

#include <cstdio>
#include <thread>
#include <vector>

// <chorus/chorus.hpp> brings no CAF header (that is <chorus/caf.hpp>'s, for chorus::caf).
#ifdef CAF_VERSION
#error "<chorus/chorus.hpp> included a CAF header"
#endif

// Only the public headers are installed: no layer's internal header is reachable.
#if __has_include("core/wait.hpp") || __has_include("runtime/runtime_impl.hpp") || __has_include("strategies/tuning.hpp")
#error "an internal chorus header is visible to a user of the installed package"
#endif

int main() {
  using namespace chorus;
  constexpr uint32_t peers = 2;
  constexpr std::size_t n = 1000;
  Runtime runtime;
  Config config;
  config.num_devices = peers;
  config.timeout = std::chrono::seconds(10);
  int failures = 0;
  std::vector<std::thread> threads;
  std::vector<int> bad(peers, 0);
  for (uint32_t id = 0; id < peers; ++id)
    threads.emplace_back([&, id] {
      auto peer = runtime.register_peer(id, config);
      if (!peer) {
        std::fprintf(stderr, "peer %u: register: %s\n", id, peer.status().to_string().c_str());
        bad[id] = 1;
        return;
      }
      // Peer p holds (p + 1) * i at index i, so the sum is 3 * i.
      std::vector<float> v(n);
      for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>((id + 1) * i);
      Tensor t = Tensor::from(v);
      Work w = peer->all_reduce_async(t, ReduceOp::sum);
      if (Status s = w.wait(); !s) {
        std::fprintf(stderr, "peer %u: all_reduce: %s\n", id, s.to_string().c_str());
        bad[id] = 1;
      } else {
        for (std::size_t i = 0; i < n; ++i)
          if (t.data_as<float>()[i] != static_cast<float>(3 * i)) {
            std::fprintf(stderr, "peer %u: element %zu is %g, expected %zu\n", id, i, t.data_as<float>()[i], 3 * i);
            bad[id] = 1;
            break;
          }
      }
      if (Status s = peer->finish(); !s) bad[id] = 1;
    });
  for (auto& t : threads) t.join();
  for (int b : bad) failures += b;
  std::printf("%s\n", failures ? "consumer: FAILED" : "consumer: all_reduce of 2 peers correct");
  return failures ? 1 : 0;
}
