// The collective's configuration: how many peers, which strategy per op kind and level, when auto
// switches from tree to ring, and how long any wait may last. validate() names what is wrong.
#pragma once
#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include <chorus/result.hpp>
#include <chorus/status.hpp>
#include <chorus/strategy.hpp>
#include <chorus/types.hpp>

namespace chorus {

// How the node processes of one host exchange data: `automatic` through shared memory (the
// sockets then only wake and watch), `network` through their sockets as if on different hosts
// (to measure or debug the network path on one machine). Every node must agree.
enum class HostTransport : uint8_t { automatic = 0, network = 1 };
std::string_view to_string(HostTransport t);

inline constexpr std::size_t num_collective_kinds = static_cast<std::size_t>(OpKind::barrier) + 1;

struct Config {
  uint32_t num_devices = 1;  // peers of this process; ids are 0 .. num_devices-1
  static constexpr uint32_t kMaxDevices = 4096;  // peers of one process (so of one node), at most
  // Per op kind (all_reduce .. barrier): auto or a fixed strategy, at the local level.
  std::array<StrategyChoice, num_collective_kinds> local{};
  std::size_t auto_threshold_bytes = 256 * 1024;  // auto: below, a tree; at or above, a ring
  int auto_tree_arity = 2;
  // Every wait of an op gives up after this. A process's own setting: nodes need not share it.
  std::chrono::milliseconds timeout{30000};

  // Global fields, filled by the multi-node layer (0 nodes: one process).
  uint32_t num_nodes = 0;
  std::string orchestrator_address;
  std::string node_address;
  std::array<StrategyChoice, num_collective_kinds> global{};
  HostTransport host_transport = HostTransport::automatic;
  std::string secret;  // the orchestrator's shared secret (never compared or sent between nodes)
  // TLS to the orchestrator (PEM files of this node; all three or none). Per node, never compared.
  std::string tls_certificate, tls_key, tls_ca;
  bool has_tls() const { return !tls_certificate.empty() || !tls_key.empty() || !tls_ca.empty(); }
  // Without those files, the data connections between nodes of different hosts are TLS 1.3 keyed
  // by the secret and the job's token (no certificates; needs a secret). Off: they are plain TCP,
  // authenticated by the token. Encrypting costs (AES-GCM in user space: docs/multi-node.md).
  // CHORUS_SEAL_DATA=0|1 sets it from the environment. Every node must agree.
  bool seal_data = false;
  // Logging (per process, never compared): "error", "warn", "info", "trace" or "" (nothing), and
  // the subsystems ("init,op,net,shm,orch,cuda" or "" for all). CHORUS_DEBUG and
  // CHORUS_DEBUG_SUBSYS win over them.
  std::string debug, debug_subsys;
  // The flight recorder (per process, never compared): the ops kept per local peer (0: none),
  // the directory its dumps go to ("": TMPDIR, else /tmp), and whether SIGUSR1 dumps it.
  // CHORUS_FLIGHT_RECORDER, CHORUS_FLIGHT_DIR and CHORUS_FLIGHT_SIGNAL=0|1 win over them.
  uint32_t flight_recorder = 256;
  static constexpr uint32_t kMaxFlightRecorder = 1u << 20;  // a bound on the recorder's memory
  std::string flight_dir;
  bool flight_signal = true;
  // The trace (per process, never compared): the file each process writes its peers' op and step
  // spans to when the Runtime shuts down, in Chrome's Trace Event Format ("": none). %p becomes
  // the process id, %n the node id; in multi-node mode a name with neither gets ".nodeN" before
  // its extension (README, "Trace"). CHORUS_TRACE wins over it.
  std::string trace_file;

  // Launching (per node, never compared; docs/launching.md). `rank`: this node's id in the
  // collective as its launcher numbered the processes (-1: the orchestrator numbers the nodes in
  // arrival order); ranks given are distinct and below num_nodes.
  int32_t rank = -1;
  // How long the join may take: reaching the orchestrator (tried again with backoff, since a
  // launcher may start it late) and waiting for every node. 0: the op timeout.
  std::chrono::milliseconds join_timeout{0};
  // This process hosts the orchestrator, at orchestrator_address (rank 0's part when a launcher
  // named no orchestrator); it serves the collective while the Runtime lives.
  bool host_orchestrator = false;
  // One host, no address given (mpirun, srun): rank 0 hosts the orchestrator on a free port and
  // writes it (with a secret it draws, when none is given) to this file of a directory only this
  // user may enter; the other ranks read it. orchestrator_address stays empty.
  std::string rendezvous_file;
  // Elastic membership (docs/elastic.md): the job admits newcomers after it starts, which the
  // members then take in with Peer::grow. Every node must agree. Shrink needs no such setting.
  bool elastic = false;
  // This process is a newcomer to a running elastic job (chorus-run --join, CHORUS_JOIN=1): it
  // waits for the members' grow and is never taken as one of the job's first nodes. Per node,
  // never compared.
  bool newcomer = false;

  // A config from the environment a launcher sets: chorus-run's CHORUS_*, torchrun's, Slurm's or
  // Open MPI's (docs/launching.md lists each variable and which wins). Without a launcher: one
  // process. The error names the variable and what is wrong with its value.
  static Result<Config> from_env();
  std::chrono::milliseconds join_limit() const { return join_timeout.count() > 0 ? join_timeout : timeout; }

  // Sets the local strategy for every op kind at once.
  Config& with_local_strategy(StrategyChoice s);
  Config& with_global_strategy(StrategyChoice s);

  Status validate() const;
  // The first field in which two configs differ ("" when equal), e.g. "num_devices (4 vs 2)".
  std::string first_difference(const Config& other) const;
  bool operator==(const Config& o) const { return first_difference(o).empty(); }
};

} // namespace chorus
