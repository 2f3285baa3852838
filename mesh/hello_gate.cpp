#include "mesh/hello_gate.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <optional>

#include "mesh/data_hello.hpp"
#include "core/log.hpp"
#include "core/spare_threads.hpp"
#include "transport/socket.hpp"

namespace chorus {

struct HelloGate::Shared {
  Config config;
  TopologyData topo;
  DataSeal seal;
  std::vector<bool> share_memory;
  std::vector<std::string> addresses;  // the expected nodes' (empty: every address may come)
  int wake = -1;  // eventfd: a check finished
  std::mutex mu;  // guards the three below
  std::vector<Admitted> done;
  std::size_t turned_away = 0;           // strangers turned away (a flood may bring many)
  std::string first_turned_away;         // and why the first was
  bool closed = false;                    // the gate is gone: checks close what they hold
  std::size_t elsewhere = 0;              // closed at once: from no expected node's address
  std::string first_elsewhere;            // the first such address
  std::size_t pending = 0;
  std::optional<Status> cancelled;  // cancel(): admit() returns it
  void turn_away(const std::string& why) {  // under mu
    if (turned_away++ == 0) first_turned_away = why;
  }
  ~Shared() {
    for (auto& a : done)
      if (a.fd >= 0) ::close(a.fd);
    if (wake >= 0) ::close(wake);
  }
};

namespace {
// The addresses the nodes after `topo.node_id` connect from (their advertised data addresses);
// empty when one of them cannot be told.
std::vector<std::string> expected_addresses(const TopologyData& topo) {
  std::vector<std::string> out;
  for (uint32_t j = topo.node_id + 1; j < topo.num_nodes; ++j) {
    std::string host;
    uint16_t port = 0;
    if (!split_host_port(topo.nodes[j].data_address, host, port) || is_wildcard_host(host)) return {};
    const auto resolved = numeric_addresses(host);
    if (resolved.empty()) return {};
    out.insert(out.end(), resolved.begin(), resolved.end());
  }
  return out;
}
} // namespace

HelloGate::HelloGate(const Config& config, const TopologyData& topo, DataSeal seal,
                     std::vector<bool> share_memory, bool by_address)
    : shared_(std::make_shared<Shared>()) {
  if (by_address) shared_->addresses = expected_addresses(topo);
  shared_->config = config;
  shared_->topo = topo;
  shared_->seal = std::move(seal);
  shared_->share_memory = std::move(share_memory);
  shared_->wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
}

HelloGate::~HelloGate() {
  std::lock_guard<std::mutex> lk(shared_->mu);
  shared_->closed = true;
}

// One connection: TLS and the hello within kHelloWait of its arrival (a stranger's budget), then
// our hello and the shared-memory offer within the setup's deadline.
void HelloGate::check(std::shared_ptr<Shared> sh, int fd, Clock::time_point deadline) {
  const auto quick = std::min(deadline, Clock::now() + kHelloWait);
  Admitted a;
  a.fd = fd;
  std::string why;
  if (sh->seal.context) {
    auto r = sh->seal.handshake(fd, /*server=*/true, quick);
    if (r.is_ok()) a.tls = std::move(*r);
    else why = "TLS: " + r.status().message();
  }
  if (why.empty()) {
    if (auto s = read_hello(fd, a.tls.get(), sh->topo, quick, a.node); !s.is_ok()) why = "hello: " + s.message();
    else if (a.node < sh->topo.node_id) why = "hello names node " + std::to_string(a.node) + ", which this node connects to";
  }
  if (why.empty())
    if (auto s = send_hello(fd, a.tls.get(), sh->topo, deadline); !s.is_ok()) why = "our hello: " + s.message();
  if (why.empty() && sh->share_memory[a.node]) {
    auto ch = ShmChannel::offer(fd, a.tls.get(), sh->topo.collective, sh->topo.token, deadline);
    if (ch.is_ok()) {
      a.shm = std::move(*ch);
      a.shm_declined = !a.shm;
    } else {
      why = "shared memory with node " + std::to_string(a.node) + ": " + ch.status().message();
    }
  }
  if (!why.empty())
    CHORUS_LOG(info, net, (LogWhere{sh->topo.node_id}), "data port: a connection turned away (" + why + ")");
  std::lock_guard<std::mutex> lk(sh->mu);
  --sh->pending;
  if (!why.empty() || sh->closed) {
    ::close(fd);
    if (!why.empty()) sh->turn_away(why);
  } else {
    sh->done.push_back(std::move(a));
  }
  const uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(sh->wake, &one, sizeof one);
}

void HelloGate::cancel(Status why) {
  {
    std::lock_guard<std::mutex> lk(shared_->mu);
    shared_->cancelled = std::move(why);
  }
  const uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(shared_->wake, &one, sizeof one);
}

Status HelloGate::admit(int listen_fd, const std::vector<uint32_t>& expected, Clock::time_point deadline,
                        std::vector<Admitted>& admitted) {
  Shared& sh = *shared_;
  const uint32_t me = sh.topo.node_id;
  admitted.resize(sh.topo.num_nodes);
  auto missing = [&] {
    std::vector<uint32_t> m;
    for (uint32_t j : expected)
      if (admitted[j].fd < 0) m.push_back(j);
    return m;
  };
  for (;;) {
    {  // what the checks found
      std::lock_guard<std::mutex> lk(sh.mu);
      if (sh.cancelled) return *sh.cancelled;
      for (auto& a : sh.done) {
        if (admitted[a.node].fd >= 0) {  // a second connection claiming a node that came already
          ::close(a.fd);
          sh.turn_away("a second connection for node " + std::to_string(a.node));
        } else {
          admitted[a.node] = std::move(a);
        }
      }
      sh.done.clear();
    }
    const auto left = missing();
    if (left.empty()) return Status::ok();
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (ms <= 0) {
      std::string nodes;
      for (uint32_t j : left) nodes += (nodes.empty() ? "" : ", ") + std::to_string(j);
      std::string msg = "node " + std::to_string(me) + ": no data connection from node" + (left.size() > 1 ? "s " : " ") +
                        nodes + " within the timeout";
      std::lock_guard<std::mutex> lk(sh.mu);
      if (sh.turned_away > 0)
        msg += " (" + std::to_string(sh.turned_away) + " other connection(s) turned away; the first: " +
               sh.first_turned_away + ")";
      if (sh.elsewhere > 0)
        msg += " (" + std::to_string(sh.elsewhere) + " connection(s) from addresses of no node closed at once; the first from " +
               sh.first_elsewhere + ")";
      return {Errc::timeout, msg};
    }
    // While kMaxPending are being checked, nothing more is accepted: what comes waits in the
    // listener's backlog for its turn (each check ends within kHelloWait) rather than being
    // closed, so a burst of strangers delays the nodes behind it instead of failing the setup. A
    // flood that outpaces the checks (kMaxPending per kHelloWait) can still hold them past the
    // deadline: the README says to firewall the data ports.
    bool full;
    {
      std::lock_guard<std::mutex> lk(sh.mu);
      full = sh.pending >= kMaxPending;
    }
    pollfd ps[2] = {{full ? -1 : listen_fd, POLLIN, 0}, {sh.wake, POLLIN, 0}};
    if (::poll(ps, 2, static_cast<int>(std::min<int64_t>(ms, 1000))) <= 0) continue;
    if (ps[1].revents) {
      uint64_t v;
      [[maybe_unused]] auto n = ::read(sh.wake, &v, sizeof v);
    }
    if (full || !ps[0].revents) continue;
    int fd = -1;
    if (!tcp_accept(listen_fd, Clock::now() + std::chrono::milliseconds(50), fd).is_ok()) continue;  // readable: at once
    if (!sh.addresses.empty()) {
      const std::string from = peer_ip(fd);
      if (std::find(sh.addresses.begin(), sh.addresses.end(), from) == sh.addresses.end()) {
        ::close(fd);  // unread: a stranger's bytes are never looked at
        std::lock_guard<std::mutex> lk(sh.mu);
        if (sh.elsewhere++ == 0) {
          sh.first_elsewhere = from.empty() ? "an unknown address" : from;
          CHORUS_LOG(info, net, (LogWhere{me}), "data port: closed a connection from " + sh.first_elsewhere +
                                                     ", the address of no node of the job (more are counted, not logged)");
        }
        continue;
      }
    }
    std::lock_guard<std::mutex> lk(sh.mu);
    ++sh.pending;
    // Ends by its deadline; owns its socket.
    run_on_spare_thread([sh = shared_, fd, deadline] { check(sh, fd, deadline); }).detach();
  }
}

} // namespace chorus
