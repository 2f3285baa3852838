// Elastic data-parallel training (docs/elastic.md): every process trains one small model with
// GradientSync averaging its gradients. When a process dies, the survivors shrink and go on; a
// newcomer started with `chorus-run --join` makes them grow, and gets the model from rank 0.
//
//   build/bin/chorus-run -n 4 --elastic --join-file /tmp/job.join build/bin/chorus-elastic-example
//   kill -9 <one of its processes>                  # the others shrink to 3 and go on
//   build/bin/chorus-run --join /tmp/job.join -n 1 build/bin/chorus-elastic-example   # grow to 4
//
// Options: --steps S (default 300), --step-ms MS of simulated compute per step (default 10),
// --stop-file F: stop at the first step at which some member sees F (scripts/elastic_soak.py).
// The model is w (4096 floats) pulled toward a fixed target; each rank's gradient is w - target
// plus a noise that averages to zero over any set of ranks 0..M-1, so the result does not depend
// on who was there: every process ends with the same weights, which it checks.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <chorus/chorus.hpp>

namespace {

using namespace chorus;
using Ms = std::chrono::duration<double, std::milli>;
constexpr std::size_t kWeights = 4096;
constexpr float kRate = 0.05f;

float target(std::size_t k) { return std::sin(0.001f * static_cast<float>(k)); }

struct Trainer {
  Peer world;
  GradientSync sync{world, GradSyncOptions{.op = ReduceOp::avg}};
  std::vector<float> w = std::vector<float>(kWeights, 0.f);
  uint32_t step = 0, shrinks = 0, grows = 0;

  // After every change of members: rank 0's weights and step, everywhere; the sync runs on the
  // new world (its registration is collective: every member and newcomer makes it again).
  Status adopt(Peer next) {
    world = next;
    if (Status s = sync.set_peer(world); !s) return s;
    std::vector<float> state(w);
    state.push_back(static_cast<float>(step));
    Tensor t = Tensor::from(state);
    if (Status s = world.broadcast(t, 0); !s) return s;
    const float* got = t.data_as<float>();
    w.assign(got, got + kWeights);
    step = static_cast<uint32_t>(got[kWeights]);
    return sync.register_params({ParamSpec{0, DType::f32, kWeights, 1}});
  }

  void say(const std::string& line) const {
    if (world.rank() == 0) std::printf("elastic: %s\n", line.c_str()), std::fflush(stdout);
  }

  // A member was lost (or the world revoked): shrink to the survivors, as often as it takes.
  Status recover(Status why) {
    while (why.code() == Errc::node_lost || why.code() == Errc::revoked) {
      const auto t0 = std::chrono::steady_clock::now();
      auto next = world.shrink();
      if (!next) return next.status();
      why = adopt(*next);
      if (why) {
        ++shrinks;
        char line[96];
        std::snprintf(line, sizeof line, "shrink to %u members in %.1f ms", world.size(),
                      Ms(std::chrono::steady_clock::now() - t0).count());
        say(line);
      }
    }
    return why;
  }

  // One step, or a grow when newcomers wait, or the end when a member saw the stop file (every
  // member decides alike: the max of what each saw).
  bool stop = false;
  Status one(uint32_t step_ms, const char* stop_file) {
    const bool seen = stop_file && ::access(stop_file, F_OK) == 0;
    Tensor waiting = Tensor::from(std::vector<float>{static_cast<float>(world.newcomers()), seen ? 1.f : 0.f});
    if (Status s = world.all_reduce(waiting, ReduceOp::max); !s) return s;
    if (waiting.data_as<float>()[1] > 0) {
      stop = true;
      return Status::ok();
    }
    if (waiting.data_as<float>()[0] > 0) {
      const auto t0 = std::chrono::steady_clock::now();
      auto next = world.grow();
      if (!next) return next.status();
      if (Status s = adopt(*next); !s) return s;
      ++grows;
      char line[96];
      std::snprintf(line, sizeof line, "grow to %u members in %.1f ms", world.size(),
                    Ms(std::chrono::steady_clock::now() - t0).count());
      say(line);
      return Status::ok();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));  // the forward and backward pass
    const float noise = 0.01f * (static_cast<float>(world.rank()) - 0.5f * static_cast<float>(world.size() - 1));
    std::vector<float> g(kWeights);
    for (std::size_t k = 0; k < kWeights; ++k) g[k] = w[k] - target(k) + noise;
    Tensor grad = Tensor::from(g);
    if (Status s = sync.submit(0, grad); !s) return s;
    if (Status s = sync.sync(); !s) return s;
    const float* avg = grad.data_as<float>();
    for (std::size_t k = 0; k < kWeights; ++k) w[k] -= kRate * avg[k];
    ++step;
    return Status::ok();
  }
};

// The weights after `steps` steps of the full-batch rule above, computed alone.
double expected_error(uint32_t steps) {
  // w_k(t) = target_k * (1 - (1 - rate)^t): the distance to the target shrinks by (1 - rate) a step.
  return std::pow(1.0 - kRate, steps);
}

} // namespace

int main(int argc, char** argv) {
  uint32_t steps = 300, step_ms = 10;
  const char* stop_file = nullptr;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--steps")) steps = static_cast<uint32_t>(std::atoi(argv[i + 1]));
    else if (!std::strcmp(argv[i], "--step-ms")) step_ms = static_cast<uint32_t>(std::atoi(argv[i + 1]));
    else if (!std::strcmp(argv[i], "--stop-file")) stop_file = argv[i + 1];
  }
  auto cfg = Config::from_env();
  if (!cfg) return std::fprintf(stderr, "chorus-elastic-example: %s\n", cfg.status().to_string().c_str()), 2;
  cfg->num_devices = 1;
  Runtime rt;
  auto peer = rt.register_peer(0, *cfg);  // a newcomer waits here until the members grow
  if (!peer) return std::fprintf(stderr, "chorus-elastic-example: %s\n", peer.status().to_string().c_str()), 1;
  Trainer t{*peer};
  Status s = t.adopt(*peer);  // everyone starts from rank 0's state (a newcomer: the members')
  std::printf("elastic: rank %u of %u, pid %d\n", t.world.rank(), t.world.size(), static_cast<int>(getpid()));
  std::fflush(stdout);
  s = t.recover(s);
  while (s && t.step < steps && !t.stop) {
    s = t.one(step_ms, stop_file);
    if (!s) s = t.recover(s);
  }
  if (!s) return std::fprintf(stderr, "chorus-elastic-example: %s\n", s.to_string().c_str()), 1;
  // Every member holds the same weights, at the distance to the target the rule gives.
  double worst = 0;
  for (std::size_t k = 0; k < kWeights; ++k) {
    const double want = target(k) * (1.0 - expected_error(t.step));
    worst = std::max(worst, std::fabs(t.w[k] - want));
  }
  const bool good = worst < 1e-3;
  char line[160];
  std::snprintf(line, sizeof line, "done steps=%u members=%u shrinks=%u grows=%u weights %s (max error %.2g)", t.step,
                t.world.size(), t.shrinks, t.grows, good ? "ok" : "WRONG", worst);
  t.say(line);
  (void)t.world.finish();
  return good ? 0 : 1;
}
