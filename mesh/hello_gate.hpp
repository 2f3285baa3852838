// The accepting side of the data mesh: every connection that comes to this node's data port is
// checked on a thread of its own (TLS handshake and hello within kHelloWait of its arrival), so a
// silent, slow or garbled stranger never holds up the nodes still to come; at most kMaxPending are
// checked at once (more wait in the listener's backlog for their turn). Strangers are turned away
// and counted. Before any of that, a connection from an address that is none of the expected
// nodes' (each leaves from the data address it advertised) is closed at once, unread and
// uncounted against the checks, so a flood from elsewhere cannot fill them.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <chorus/config.hpp>
#include <chorus/status.hpp>
#include "messages/node_codec.hpp"
#include "transport/shm/shm_channel.hpp"
#include "mesh/data_seal.hpp"
#include "transport/tls/tls_channel.hpp"

namespace chorus {

class HelloGate {
 public:
  static constexpr std::chrono::milliseconds kHelloWait{3000};
  static constexpr std::size_t kMaxPending = 64;

  // A node that proved itself: its socket, TLS channel and shared-memory segment, if any.
  struct Admitted {
    uint32_t node = 0;
    int fd = -1;
    std::unique_ptr<TlsChannel> tls;
    std::unique_ptr<ShmChannel> shm;
    bool shm_declined = false;  // same host, but the other side could not attach
  };

  // `seal`: the TLS every connection runs first (none: plain). `share_memory(node)`: whether the
  // pair with `node` goes through shared memory. `by_address`: close connections from addresses of no expected node at once (off when an
  // expected node's address cannot be told: a wildcard, or a name that does not resolve).
  HelloGate(const Config& config, const TopologyData& topo, DataSeal seal,
            std::vector<bool> share_memory, bool by_address = true);
  ~HelloGate();  // closes what was not taken; checks still running close their own

  // Accepts on `listen_fd` until every node in `expected` has come or the deadline passes.
  // Admitted nodes come back by node id (index); the error names the nodes that never came and
  // what the strangers turned away were told.
  Status admit(int listen_fd, const std::vector<uint32_t>& expected, Clock::time_point deadline,
               std::vector<Admitted>& admitted);
  // Ends an admit() under way (from another thread) with `why`: the setup failed elsewhere.
  void cancel(Status why);

 private:
  struct Shared;  // what the checking threads and the gate share (outlives the gate)
  static void check(std::shared_ptr<Shared> sh, int fd, Clock::time_point deadline);
  std::shared_ptr<Shared> shared_;
};

} // namespace chorus
