// Data-parallel training of a small MLP (8 inputs -> 32 tanh -> 1 output, MSE, plain SGD) with
// GradientSync: 4 peers (threads), each with its own quarter of every batch; gradients averaged
// (ReduceOp::avg) bucket by bucket while the backward pass goes on. Checks at the end:
//  - every replica's weights are bit-identical (byte comparison),
//  - the loss fell,
//  - the same training with 1 peer and the full batch gives the same loss curve, within a relative
//    tolerance of 1e-4 per epoch (float32 math: the 4-peer run sums each gradient in a different
//    order - per shard, then across peers - so the curves agree to rounding, not bit for bit).
// Exits non-zero when a check fails.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include <chorus/chorus.hpp>
#include <chorus/grad_sync.hpp>

using namespace chorus;

namespace {

constexpr int kIn = 8, kHidden = 32;
constexpr int kSamples = 2048, kBatch = 128, kEpochs = 25;
constexpr float kLr = 0.1f;

struct Data {
  std::vector<float> x, y;  // x: kSamples x kIn
};

Data make_data() {
  Data d;
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> w(kIn);
  for (auto& v : w) v = u(rng);
  d.x.resize(kSamples * kIn);
  d.y.resize(kSamples);
  for (int s = 0; s < kSamples; ++s) {
    float dot = 0;
    for (int i = 0; i < kIn; ++i) {
      d.x[s * kIn + i] = u(rng);
      dot += w[i] * d.x[s * kIn + i];
    }
    d.y[s] = std::sin(2.0f * dot) + 0.5f * d.x[s * kIn] * d.x[s * kIn + 1];
  }
  return d;
}

// Parameter ids, registered in the order backward produces their gradients (output layer first).
enum : uint64_t { kB2 = 0, kW2 = 1, kB1 = 2, kW1 = 3 };

struct Model {
  std::vector<float> w1 = std::vector<float>(kHidden * kIn), b1 = std::vector<float>(kHidden),
                     w2 = std::vector<float>(kHidden), b2 = std::vector<float>(1);
  std::vector<float*> all() { return {b2.data(), w2.data(), b1.data(), w1.data()}; }
  std::vector<float> bytes() const {
    std::vector<float> v(w1);
    v.insert(v.end(), b1.begin(), b1.end());
    v.insert(v.end(), w2.begin(), w2.end());
    v.insert(v.end(), b2.begin(), b2.end());
    return v;
  }
};

void init_model(Model& m) {
  std::mt19937 rng(42);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (auto& v : m.w1) v = n(rng) / std::sqrt(float(kIn));
  for (auto& v : m.w2) v = n(rng) / std::sqrt(float(kHidden));
}

double full_loss(const Model& m, const Data& d) {
  double sum = 0;
  for (int s = 0; s < kSamples; ++s) {
    float out = m.b2[0];
    for (int h = 0; h < kHidden; ++h) {
      float a = m.b1[h];
      for (int i = 0; i < kIn; ++i) a += m.w1[h * kIn + i] * d.x[s * kIn + i];
      out += m.w2[h] * std::tanh(a);
    }
    const double e = out - d.y[s];
    sum += e * e;
  }
  return sum / kSamples;
}

struct RunResult {
  std::vector<double> losses;  // before training, then after each epoch (replica 0)
  std::vector<std::vector<float>> weights;  // per replica at the end
  bool ok = true;
};

RunResult train(uint32_t peers, const Data& data) {
  RunResult res;
  res.weights.resize(peers);
  Runtime rt;
  Config cfg;
  cfg.num_devices = peers;
  cfg.timeout = std::chrono::milliseconds(10000);
  std::vector<std::thread> threads;
  std::mutex mu;
  for (uint32_t p = 0; p < peers; ++p)
    threads.emplace_back([&, p] {
      auto fail = [&](const char* what, const Status& s) {
        std::fprintf(stderr, "peer %u: %s: %s\n", p, what, s.to_string().c_str());
        std::lock_guard lk(mu);
        res.ok = false;
      };
      auto peer = rt.register_peer(p, cfg);
      if (!peer) return fail("register_peer", peer.status());
      Model m;
      if (p == 0) init_model(m);
      // Replica 0's initial weights go to everyone (like DDP's initial broadcast).
      for (float* w : m.all()) {
        const std::size_t n = w == m.w1.data() ? m.w1.size() : w == m.b1.data() ? m.b1.size()
                              : w == m.w2.data() ? m.w2.size() : 1;
        Tensor t = Tensor::borrow(w, DType::f32, {static_cast<int64_t>(n)});
        if (Status s = peer->broadcast(t, 0); !s) return fail("broadcast", s);
      }
      GradSyncOptions opts;
      opts.op = ReduceOp::avg;
      opts.bucket_bytes = 512;  // small model: 2 buckets, {b2, w2, b1} and {w1}
      opts.timeout = cfg.timeout;
      GradientSync gs(*peer, opts);
      if (Status s = gs.register_params({{kB2, DType::f32, 1, 1},
                                         {kW2, DType::f32, kHidden, 1},
                                         {kB1, DType::f32, kHidden, 1},
                                         {kW1, DType::f32, kHidden * kIn, 1}});
          !s)
        return fail("register_params", s);

      const int shard = kBatch / static_cast<int>(peers);
      std::vector<float> hid(shard * kHidden), err(shard);
      if (p == 0) res.losses.push_back(full_loss(m, data));  // epoch 0: before training
      for (int epoch = 0; epoch < kEpochs; ++epoch) {
        for (int b0 = 0; b0 < kSamples; b0 += kBatch) {
          const int first = b0 + static_cast<int>(p) * shard;
          // Forward on this peer's shard.
          for (int s = 0; s < shard; ++s) {
            const float* x = &data.x[(first + s) * kIn];
            float out = m.b2[0];
            for (int h = 0; h < kHidden; ++h) {
              float a = m.b1[h];
              for (int i = 0; i < kIn; ++i) a += m.w1[h * kIn + i] * x[i];
              hid[s * kHidden + h] = std::tanh(a);
              out += m.w2[h] * hid[s * kHidden + h];
            }
            // d(mean squared error over the shard)/d(out); avg over peers = the full-batch mean.
            err[s] = 2.0f * (out - data.y[first + s]) / static_cast<float>(shard);
          }
          // Backward, submitting each gradient as soon as it is ready (output layer first).
          Tensor gb2 = Tensor::zeros(DType::f32, {1}), gw2 = Tensor::zeros(DType::f32, {kHidden});
          Tensor gb1 = Tensor::zeros(DType::f32, {kHidden}), gw1 = Tensor::zeros(DType::f32, {kHidden * kIn});
          float* pb2 = gb2.data_as<float>();
          float* pw2 = gw2.data_as<float>();
          float* pb1 = gb1.data_as<float>();
          float* pw1 = gw1.data_as<float>();
          for (int s = 0; s < shard; ++s) pb2[0] += err[s];
          if (Status st = gs.submit(kB2, gb2); !st) return fail("submit", st);
          for (int s = 0; s < shard; ++s)
            for (int h = 0; h < kHidden; ++h) pw2[h] += err[s] * hid[s * kHidden + h];
          if (Status st = gs.submit(kW2, gw2); !st) return fail("submit", st);
          for (int s = 0; s < shard; ++s) {
            const float* x = &data.x[(first + s) * kIn];
            for (int h = 0; h < kHidden; ++h) {
              const float t = hid[s * kHidden + h];
              const float dz = err[s] * m.w2[h] * (1.0f - t * t);
              pb1[h] += dz;
              for (int i = 0; i < kIn; ++i) pw1[h * kIn + i] += dz * x[i];
            }
          }
          if (Status st = gs.submit(kB1, gb1); !st) return fail("submit", st);
          if (Status st = gs.submit(kW1, gw1); !st) return fail("submit", st);
          if (Status st = gs.sync(); !st) return fail("sync", st);
          // SGD with the averaged gradients (written back into gw1 .. gb2 by sync()).
          for (int h = 0; h < kHidden * kIn; ++h) m.w1[h] -= kLr * pw1[h];
          for (int h = 0; h < kHidden; ++h) m.b1[h] -= kLr * pb1[h];
          for (int h = 0; h < kHidden; ++h) m.w2[h] -= kLr * pw2[h];
          m.b2[0] -= kLr * pb2[0];
        }
        if (p == 0) res.losses.push_back(full_loss(m, data));
      }
      res.weights[p] = m.bytes();
      if (Status s = peer->finish(); !s) return fail("finish", s);
    });
  for (auto& t : threads) t.join();
  return res;
}

}  // namespace

int main() {
  const auto t0 = std::chrono::steady_clock::now();
  const Data data = make_data();
  RunResult four = train(4, data);
  RunResult one = train(1, data);
  if (!four.ok || !one.ok) return 1;
  bool ok = true;
  constexpr double kTol = 1e-4;  // relative, per epoch
  std::printf("epoch  loss(4 peers)  loss(1 peer, full batch)  rel.diff\n");
  for (int e = 0; e <= kEpochs; ++e) {
    const double rel = std::fabs(four.losses[e] - one.losses[e]) / std::max(1e-12, one.losses[e]);
    std::printf("%5d  %13.6f  %24.6f  %8.1e\n", e, four.losses[e], one.losses[e], rel);
    if (rel > kTol) ok = false;
  }
  if (!ok) std::printf("FAIL: the 4-peer loss curve differs from the 1-peer one by more than %.0e\n", kTol);
  for (std::size_t r = 1; r < four.weights.size(); ++r)
    if (four.weights[r].size() != four.weights[0].size() ||
        std::memcmp(four.weights[r].data(), four.weights[0].data(), four.weights[0].size() * sizeof(float)) != 0) {
      std::printf("FAIL: replica %zu's weights differ from replica 0's\n", r);
      ok = false;
    }
  if (ok) std::printf("replicas 0..3: weights bit-identical (%zu floats)\n", four.weights[0].size());
  if (!(four.losses.back() < 0.5 * four.losses.front())) {
    std::printf("FAIL: the loss did not fall (%.6f -> %.6f)\n", four.losses.front(), four.losses.back());
    ok = false;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s in %.2f s\n", ok ? "OK" : "FAILED", secs);
  return ok ? 0 : 1;
}
