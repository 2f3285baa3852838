#include "actors/global_client/data_mesh.hpp"

#include <unistd.h>

#include <mutex>

#include "actors/global_client/data_hello.hpp"
#include "actors/global_client/hello_gate.hpp"
#include "core/log.hpp"
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
                    Clock::time_point deadline, std::vector<std::unique_ptr<Connection>>& conns) {
  const uint32_t me = topo.node_id, n = topo.num_nodes;
  std::vector<int> fds(n, -1);
  auto fail = [&](Status s) {
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
    return s;
  };
  // With TLS files, every data connection is TLS with the same certificate, key and CA as the
  // control channel (mutually authenticated); never a silent fallback to plain TCP.
  std::shared_ptr<TlsContext> tls;
  if (config.has_tls()) {
    auto ctx = TlsContext::load(config.tls_certificate, config.tls_key, config.tls_ca);
    if (!ctx.is_ok()) return ctx.status();
    tls = std::move(*ctx);
  }
  std::vector<std::unique_ptr<TlsChannel>> channels(n);
  std::vector<std::unique_ptr<ShmChannel>> shm(n);
  // Lower ids accept (the TLS servers), higher ids connect: every pair gets exactly one connection.
  for (uint32_t j = 0; j < me; ++j) {
    const std::string name = "node " + std::to_string(j);
    std::string host;
    uint16_t port = 0;
    if (!split_host_port(topo.nodes[j].data_address, host, port))
      return fail({Errc::internal, name + " has data address '" + topo.nodes[j].data_address + "'"});
    if (auto s = tcp_connect(host, port, deadline, fds[j]); !s.is_ok())
      return fail({s.code(), "data connection to " + name + ": " + s.message()});
    if (tls) {
      auto ch = TlsChannel::handshake(*tls, fds[j], /*server=*/false, deadline);
      if (!ch.is_ok()) {
        const Errc code = ch.status().code() == Errc::timeout ? Errc::timeout : Errc::auth_failed;
        return fail({code, "data connection to " + name + ": " + ch.status().message()});
      }
      channels[j] = std::move(*ch);
    }
    uint32_t who = 0;
    if (auto s = send_hello(fds[j], channels[j].get(), topo, deadline); !s.is_ok())
      return fail({s.code(), "data hello to " + name + ": " + s.message()});
    // Under TLS 1.3 a node that refuses our certificate says so here (its alert), not in the handshake.
    if (auto s = read_hello(fds[j], channels[j].get(), topo, deadline, who); !s.is_ok() || who != j)
      return fail({Errc::auth_failed, name + " answered the data hello wrongly" + (s.is_ok() ? "" : ": " + s.message())});
    if (share_memory(config, topo, j)) {  // the accepting side offers its segment
      std::string declined;
      auto ch = ShmChannel::accept(fds[j], channels[j].get(), topo.collective, topo.token, deadline, declined);
      if (!ch.is_ok()) return fail({ch.status().code(), "shared memory with " + name + ": " + ch.status().message()});
      shm[j] = std::move(*ch);
      if (!shm[j]) note_declined(me, j, declined);
      else CHORUS_LOG(info, shm, (LogWhere{me}), "node " + std::to_string(j) + ": data through shared memory");
    }
  }
  // Higher ids come to us, each checked on its own (a stranger cannot hold up the nodes to come).
  std::vector<bool> shares(n);
  std::vector<uint32_t> expected;
  for (uint32_t j = 0; j < n; ++j) {
    shares[j] = share_memory(config, topo, j);
    if (j > me) expected.push_back(j);
  }
  HelloGate gate(config, topo, tls, shares);
  std::vector<HelloGate::Admitted> admitted;
  if (auto s = gate.admit(listener.fd(), expected, deadline, admitted); !s.is_ok()) {
    for (auto& a : admitted)
      if (a.fd >= 0) ::close(a.fd);
    return fail(s);
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
