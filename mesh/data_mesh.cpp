#include "mesh/data_mesh.hpp"

#include <unistd.h>

#include <atomic>
#include <mutex>

#include "mesh/data_hello.hpp"
#include "mesh/data_seal.hpp"
#include "mesh/hello_gate.hpp"
#include "core/env.hpp"
#include "core/log.hpp"
#include "core/settings.hpp"
#include "core/spare_threads.hpp"
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

std::atomic<uint64_t> links_made{0};

} // namespace

uint64_t mesh_links_made() { return links_made.load(); }

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
                    Clock::time_point deadline, std::vector<std::shared_ptr<Connection>>& conns) {
  const uint32_t me = topo.node_id, n = topo.num_nodes;
  conns.resize(n);
  // Only the pairs without a link kept from the epoch before.
  auto fresh = [&](uint32_t j) { return j != me && !conns[j]; };
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
  // greeted, then each one's answer (hello, shared memory) is taken in turn. Their gates
  // thus answer side by side: node k waits about one round trip for its k answers, not k of them
  // one after another (over a network, the setup's length; on one loaded host it changes little,
  // since there the CPU, not the waiting, bounds it).
  auto connect_lower = [&]() -> Status {
    auto name_of = [](uint32_t j) { return "node " + std::to_string(j); };
    for (uint32_t j = 0; j < me; ++j) {
      if (!fresh(j)) continue;
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
      if (!fresh(j)) continue;
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
    }
    return Status::ok();
  };
  // Higher ids come to us, each checked on its own (a stranger cannot hold up the nodes to come).
  std::vector<bool> shares(n);
  std::vector<uint32_t> expected;
  for (uint32_t j = 0; j < n; ++j) {
    shares[j] = share_memory(config, topo, j);
    if (j > me && fresh(j)) expected.push_back(j);
  }
  HelloGate gate(config, topo, seal, shares, by_address);
  Status lower_status = Status::ok();
  SpareJob lower;
  bool below = false;
  for (uint32_t j = 0; j < me; ++j) below = below || fresh(j);
  if (below)
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
  for (uint32_t who : expected) {
    HelloGate::Admitted& a = admitted[who];
    if (a.shm_declined) note_declined(me, who, "node " + std::to_string(who) + " could not attach");
    else if (a.shm) CHORUS_LOG(info, shm, (LogWhere{me}), "node " + std::to_string(who) + ": data through shared memory");
    fds[who] = a.fd;
    channels[who] = std::move(a.tls);
    shm[who] = std::move(a.shm);
  }
  for (uint32_t j = 0; j < n; ++j)
    if (fresh(j)) {
      conns[j] = shm[j] ? shm_connection(fds[j], j, sink, std::move(shm[j]))
                        : tcp_connection(fds[j], j, sink, std::move(channels[j]));
      conns[j]->rehome(j, FrameHeader::magic_of(topo.epoch), sink);  // this epoch's stamp
      links_made.fetch_add(1);
    }
  return Status::ok();
}

} // namespace chorus
