#include "actors/global_client/data_mesh.hpp"

#include <unistd.h>

#include <mutex>

#include "core/log.hpp"
#include "messages/data_codec.hpp"
#include "messages/peer_codec.hpp"
#include "transport/socket.hpp"
#include "transport/tcp/tcp_connection.hpp"
#include "transport/tls/tls_channel.hpp"

namespace chorus {

namespace {

// The hello travels inside the TLS session when there is one.
Status send_hello(int fd, TlsChannel* tls, const TopologyData& t, Clock::time_point deadline) {
  FrameHeader h;
  h.type = FrameType::hello;
  const std::string frame = whole_frame(h, encode_data_hello({protocol_version(), t.collective, t.node_id, t.token}));
  return TlsChannel::write_all(fd, tls, frame.data(), frame.size(), deadline);
}

// Reads one hello frame and checks it belongs to this collective; returns the sender's node id.
Status read_hello(int fd, TlsChannel* tls, const TopologyData& t, Clock::time_point deadline, uint32_t& node) {
  auto read = [&](void* p, std::size_t n) { return TlsChannel::read_exact(fd, tls, p, n, deadline); };
  FrameHeader h;
  if (auto s = read(&h, sizeof h); !s.is_ok()) return s;
  if (h.magic != FrameHeader::kMagic || h.type != FrameType::hello || h.bytes > 4096)
    return {Errc::invalid_argument, "garbled hello frame"};
  std::string body(h.bytes, '\0');
  if (auto s = read(body.data(), body.size()); !s.is_ok()) return s;
  std::string error;
  auto hello = decode_data_hello(body.data(), body.size(), error);
  if (!hello) return {Errc::invalid_argument, error};
  if (hello->protocol_version != protocol_version())
    return {Errc::version_mismatch, "data hello speaks protocol " + std::to_string(hello->protocol_version)};
  if (hello->collective != t.collective || hello->token != t.token)
    return {Errc::auth_failed, "data hello with a wrong collective or token"};
  if (hello->node >= t.num_nodes || hello->node == t.node_id)
    return {Errc::invalid_argument, "data hello names node " + std::to_string(hello->node)};
  node = hello->node;
  return Status::ok();
}

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
  for (uint32_t waiting = n - 1 - me; waiting > 0;) {
    int fd = -1;
    if (auto s = tcp_accept(listener.fd(), deadline, fd); !s.is_ok())
      return fail({Errc::timeout, "node " + std::to_string(me) + ": " + std::to_string(waiting) +
                                      " data connection(s) never arrived within the timeout"});
    // A stranger (no TLS or a foreign certificate, wrong token, garbage) is turned away without
    // disturbing the nodes still to come.
    std::unique_ptr<TlsChannel> ch;
    if (tls) {
      auto r = TlsChannel::handshake(*tls, fd, /*server=*/true, deadline);
      if (!r.is_ok()) {
        ::close(fd);
        continue;
      }
      ch = std::move(*r);
    }
    uint32_t who = 0;
    if (!read_hello(fd, ch.get(), topo, deadline, who).is_ok() || who < me || fds[who] >= 0 ||
        !send_hello(fd, ch.get(), topo, deadline).is_ok()) {
      ::close(fd);
      continue;
    }
    if (share_memory(config, topo, who)) {
      auto sh = ShmChannel::offer(fd, ch.get(), topo.collective, topo.token, deadline);
      if (!sh.is_ok()) {
        ::close(fd);
        return fail({sh.status().code(), "shared memory with node " + std::to_string(who) + ": " + sh.status().message()});
      }
      shm[who] = std::move(*sh);
      if (!shm[who]) note_declined(me, who, "node " + std::to_string(who) + " could not attach");
      else CHORUS_LOG(info, shm, (LogWhere{me}), "node " + std::to_string(who) + ": data through shared memory");
    }
    fds[who] = fd;
    channels[who] = std::move(ch);
    --waiting;
  }
  conns.resize(n);
  for (uint32_t j = 0; j < n; ++j)
    if (j != me)
      conns[j] = shm[j] ? shm_connection(fds[j], j, sink, std::move(shm[j]))
                        : tcp_connection(fds[j], j, sink, std::move(channels[j]));
  return Status::ok();
}

} // namespace chorus
