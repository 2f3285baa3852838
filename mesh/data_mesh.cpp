#include "mesh/data_mesh.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <mutex>

#include "mesh/data_hello.hpp"
#include "mesh/data_seal.hpp"
#include "mesh/hello_gate.hpp"
#include "core/env.hpp"
#include "core/log.hpp"
#include "core/settings.hpp"
#include "core/spare_threads.hpp"
#include "strategies/tuning.hpp"
#include "transport/socket.hpp"
#include "transport/tcp/tcp_connection.hpp"
#include "transport/tls/tls_channel.hpp"

namespace chorus {

namespace {

// Whether the pair (me, j) runs through shared memory: same host, and not forced onto the network.
bool share_memory(const Config& config, const TopologyData& t, uint32_t j) {
  return config.host_transport == HostTransport::automatic && t.nodes[t.node_id].host == t.nodes[j].host;
}

// Said once per process (warn, shm): a pair of one host that could not share memory (e.g. the
// other process is in another PID namespace or runs as another user) goes on over its socket.
void note_declined(uint32_t me, uint32_t j, const std::string& why) {
  static std::once_flag once;
  std::call_once(once, [&] {
    CHORUS_LOG(warn, shm, (LogWhere{me}),
               "no shared memory with node " + std::to_string(j) + " on the same host (" + why +
                   "); the data goes through the socket");
  });
}

// The job's nodes all lie on one host and share memory: its arena spans every peer.
bool one_memory_domain(const Config& config, const TopologyData& t) {
  if (config.host_transport != HostTransport::automatic || t.num_nodes < 2) return false;
  for (const auto& n : t.nodes)
    if (n.host != t.nodes[0].host) return false;
  return true;
}

// What an attaching node checks the arena against: this collective's id and token.
uint64_t arena_tag(const TopologyData& t) { return t.collective * 0x9E3779B97F4A7C15ull ^ t.token; }

// The arena's memory as peer handles hold it: unmapped with the last of them.
std::shared_ptr<ArenaSeat> seat_of(Arena arena, SharedSegment& segment) {
  auto seat = std::make_shared<ArenaSeat>();
  const std::size_t bytes = segment.bytes();
  seat->memory = std::shared_ptr<void>(segment.release_mapping(), [bytes](void* p) { munmap(p, bytes); });
  seat->arena = arena;
  seat->across_nodes = true;
  return seat;
}

// Node 0: a new arena for every peer of the job (an empty segment, offered as none, where it
// cannot be made: the others then decline and nobody uses an arena).
std::shared_ptr<SharedSegment> make_arena(const TopologyData& t, std::size_t slot) {
  auto seg = SharedSegment::make("chorus-arena", Arena::region_bytes(t.total_peers, slot));
  if (!seg.is_ok()) {
    CHORUS_LOG(warn, shm, (LogWhere{t.node_id}), "no arena for the host's small ops: " + seg.status().message());
    return std::make_shared<SharedSegment>();
  }
  auto made = std::make_shared<SharedSegment>(std::move(*seg));
  Arena::create(made->base(), t.total_peers, slot, arena_tag(t));
  return made;
}

// Another node: maps the arena node 0 offers on `fd` and answers; null where it cannot.
Result<std::shared_ptr<ArenaSeat>> take_arena(const TopologyData& t, int fd, TlsChannel* tls, std::size_t slot,
                                              Clock::time_point deadline) {
  std::string why;
  auto taken = SharedSegment::take_offer(fd, tls, Arena::region_bytes(t.total_peers, slot), deadline, why);
  if (!taken.is_ok()) return taken.status();
  Arena arena;
  if (taken->mapped()) arena = Arena::attach(taken->base(), taken->bytes(), arena_tag(t), why);
  if (auto s = SharedSegment::answer(fd, tls, arena.valid(), deadline); !s.is_ok()) return s;
  if (!arena.valid()) {
    CHORUS_LOG(warn, shm, (LogWhere{t.node_id}), "no arena for the host's small ops (" + why + ")");
    return std::shared_ptr<ArenaSeat>{};
  }
  return seat_of(arena, *taken);
}

} // namespace

Result<std::unique_ptr<DataListener>> DataListener::open(const std::string& node_address) {
  std::string host;
  uint16_t port = 0;
  if (!split_host_port(node_address, host, port)) {
    host = node_address;
    port = 0;
  }
  std::unique_ptr<DataListener> l(new DataListener);
  uint16_t bound = 0;
  if (auto s = tcp_listen(host, port, l->fd_, bound); !s.is_ok()) return s;
  l->address_ = host + ":" + std::to_string(bound);
  return l;
}

DataListener::~DataListener() {
  if (fd_ >= 0) ::close(fd_);
}

Status connect_mesh(const Config& config, const TopologyData& topo, const DataListener& listener, FrameSink* sink,
                    Clock::time_point deadline, std::vector<std::unique_ptr<Connection>>& conns,
                    std::shared_ptr<ArenaSeat>& arena) {
  const uint32_t me = topo.node_id, n = topo.num_nodes;
  const std::size_t arena_slot = one_memory_domain(config, topo) ? arena_slot_bytes(topo.total_peers) : 0;
  std::vector<int> fds(n, -1);
  auto fail = [&](Status s) {
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
    return s;
  };
  // With TLS files, every data connection is TLS with the same certificate, key and CA as the
  // control channel (mutually authenticated); with seal_data, TLS keyed by the secret and the
  // job's token; never a silent fallback to plain TCP.
  auto sealing = data_seal(config, topo);
  if (!sealing) return sealing.status();
  const DataSeal& seal = *sealing;
  std::vector<std::unique_ptr<TlsChannel>> channels(n);
  std::vector<std::unique_ptr<ShmChannel>> shm(n);
  // Lower ids accept (the TLS servers), higher ids connect: every pair gets exactly one connection,
  // which leaves from this node's advertised address (the only one the other's data port admits,
  // unless CHORUS_DATA_PORT_FROM_ANY says the nodes connect from elsewhere, behind NAT).
  auto from_any = setting_number(SettingId::data_port_from_any);
  if (!from_any.is_ok()) return from_any.status();
  const bool by_address = from_any->value_or(0) == 0;
  std::string from;
  uint16_t own_port = 0;
  if (by_address && !split_host_port(topo.nodes[me].data_address, from, own_port)) from.clear();
  // Lower ids, on a thread of its own while this one admits the higher ids: a node answers those
  // who come to it while it still goes to those below it, so no node's setup waits for the whole
  // chain of lower nodes' setups first. In two passes: first every lower node is reached and
  // greeted, then each one's answer (hello, shared memory, arena) is taken in turn. Their gates
  // thus answer side by side: node k waits about one round trip for its k answers, not k of them
  // one after another (over a network, the setup's length; on one loaded host it changes little,
  // since there the CPU, not the waiting, bounds it).
  auto connect_lower = [&]() -> Status {
    auto name_of = [](uint32_t j) { return "node " + std::to_string(j); };
    for (uint32_t j = 0; j < me; ++j) {
      const std::string name = name_of(j);
      std::string host;
      uint16_t port = 0;
      if (!split_host_port(topo.nodes[j].data_address, host, port))
        return Status{Errc::internal, name + " has data address '" + topo.nodes[j].data_address + "'"};
      if (auto s = tcp_connect(host, port, deadline, fds[j], from); !s.is_ok())
        return Status{s.code(), "data connection to " + name + ": " + s.message()};
      if (seal.context) {
        auto ch = seal.handshake(fds[j], /*server=*/false, deadline);
        if (!ch.is_ok()) {
          const Errc code = ch.status().code() == Errc::timeout ? Errc::timeout : Errc::auth_failed;
          return Status{code, "data connection to " + name + ": " + ch.status().message()};
        }
        channels[j] = std::move(*ch);
      }
      if (auto s = send_hello(fds[j], channels[j].get(), topo, deadline); !s.is_ok())
        return Status{s.code(), "data hello to " + name + ": " + s.message()};
    }
    for (uint32_t j = 0; j < me; ++j) {
      const std::string name = name_of(j);
      uint32_t who = 0;
      // Under TLS 1.3 a node that refuses our certificate says so here (its alert), not in the handshake.
      // Only a wrong hello is auth_failed: a node kept busy (strangers on its port) or gone says so.
      if (auto s = read_hello(fds[j], channels[j].get(), topo, deadline, who); !s.is_ok() || who != j) {
        if (s.code() == Errc::timeout) return Status{Errc::timeout, name + " did not answer the data hello in time"};
        if (s.code() == Errc::unreachable)
          return Status{Errc::unreachable, name + " closed the data connection before its hello: " + s.message()};
        return Status{Errc::auth_failed, name + " answered the data hello wrongly" + (s.is_ok() ? "" : ": " + s.message())};
      }
      if (share_memory(config, topo, j)) {  // the accepting side offers its segment
        std::string declined;
        auto ch = ShmChannel::accept(fds[j], channels[j].get(), topo.collective, topo.token, deadline, declined);
        if (!ch.is_ok()) return Status{ch.status().code(), "shared memory with " + name + ": " + ch.status().message()};
        shm[j] = std::move(*ch);
        if (!shm[j]) note_declined(me, j, declined);
        else CHORUS_LOG(info, shm, (LogWhere{me}), "node " + std::to_string(j) + ": data through shared memory");
      }
      if (j == 0 && arena_slot > 0) {
        auto taken = take_arena(topo, fds[0], channels[0].get(), arena_slot, deadline);
        if (!taken.is_ok()) return Status{taken.status().code(), "the host's arena from node 0: " + taken.status().message()};
        arena = std::move(*taken);
      }
    }
    return Status::ok();
  };
  // Higher ids come to us, each checked on its own (a stranger cannot hold up the nodes to come).
  std::vector<bool> shares(n);
  std::vector<uint32_t> expected;
  for (uint32_t j = 0; j < n; ++j) {
    shares[j] = share_memory(config, topo, j);
    if (j > me) expected.push_back(j);
  }
  std::shared_ptr<SharedSegment> arena_segment;
  if (me == 0 && arena_slot > 0) arena_segment = make_arena(topo, arena_slot);
  HelloGate gate(config, topo, seal, shares, arena_segment, by_address);
  Status lower_status = Status::ok();
  SpareJob lower;
  if (me > 0)
    lower = run_on_spare_thread([&] {
      try {
        lower_status = connect_lower();
      } catch (const std::exception& e) {
        lower_status = Status(Errc::internal, std::string("connecting to the lower nodes: ") + e.what());
      }
      if (!lower_status.is_ok()) gate.cancel(lower_status);  // no need to wait for the higher ids
    });
  std::vector<HelloGate::Admitted> admitted;
  Status admitted_status = Status::ok();
  try {
    admitted_status = gate.admit(listener.fd(), expected, deadline, admitted);
  } catch (const std::exception& e) {
    admitted_status = Status(Errc::internal, std::string("admitting the higher nodes: ") + e.what());
  }
  if (lower.joinable()) lower.join();  // bounded: each step of it by the deadline
  if (!admitted_status.is_ok() || !lower_status.is_ok()) {
    for (auto& a : admitted)
      if (a.fd >= 0) ::close(a.fd);
    return fail(lower_status.is_ok() ? admitted_status : lower_status);
  }
  if (arena_segment && arena_segment->mapped()) {
    std::string why;
    Arena made = Arena::attach(arena_segment->base(), arena_segment->bytes(), arena_tag(topo), why);
    std::vector<uint32_t> without;
    for (uint32_t who : expected)
      if (!admitted[who].arena_attached) without.push_back(who);
    // Every node has it mapped, or it is never used: a peer skips a closed arena.
    if (without.empty()) {
      made.open();
      CHORUS_LOG(info, shm, (LogWhere{me}), "the host's small ops meet in an arena of " +
                                                std::to_string(arena_segment->bytes() >> 10) + " KiB");
    } else {
      made.close();
      CHORUS_LOG(warn, shm, (LogWhere{me}), "no arena for the host's small ops: node " + std::to_string(without[0]) +
                                                " could not map it");
    }
    arena_segment->forget_descriptor();  // every node answered: nobody else may open it any more
    if (without.empty()) arena = seat_of(made, *arena_segment);
  }
  for (uint32_t who : expected) {
    HelloGate::Admitted& a = admitted[who];
    if (a.shm_declined) note_declined(me, who, "node " + std::to_string(who) + " could not attach");
    else if (a.shm) CHORUS_LOG(info, shm, (LogWhere{me}), "node " + std::to_string(who) + ": data through shared memory");
    fds[who] = a.fd;
    channels[who] = std::move(a.tls);
    shm[who] = std::move(a.shm);
  }
  conns.resize(n);
  for (uint32_t j = 0; j < n; ++j)
    if (j != me)
      conns[j] = shm[j] ? shm_connection(fds[j], j, sink, std::move(shm[j]))
                        : tcp_connection(fds[j], j, sink, std::move(channels[j]));
  return Status::ok();
}

} // namespace chorus
