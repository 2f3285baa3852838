// The process's Runtime (chorus/runtime.hpp): its actor system (its own or the host app's), the local
// server and, in multi-node mode, the global client it spawns there; registration, the join (hosting
// rank 0's orchestrator or reading its rendezvous file), and shutdown.
#include <unistd.h>

#include <atomic>

#include <chorus/caf.hpp>
#include <chorus/runtime.hpp>

#include "observability/flight/flight_recorder.hpp"
#include "actors/global_client/global_client.hpp"
#include "actors/global_client/node_status.hpp"
#include "actors/local_server/local_server.hpp"
#include "actors/remoting.hpp"
#include "runtime/runtime_impl.hpp"
#include "runtime/peer/arena_path.hpp"
#include "observability/trace/trace.hpp"
#include "core/host_names.hpp"
#include "core/log.hpp"
#include "core/secret.hpp"
#include "cuda/gpu.hpp"
#include "messages/peer_codec.hpp"
#include "transport/rendezvous_file.hpp"
#include "transport/socket.hpp"

namespace chorus {

namespace {

// Waits until every actor of `actors` has terminated, or `limit` has passed.
void await_exits(caf::actor_system& sys, const std::vector<caf::actor>& actors, std::chrono::milliseconds limit) {
  caf::scoped_actor self{sys, true};  // hidden: the host's await_all_actors_done ignores it
  for (const auto& a : actors) self->monitor(a);  // one already gone reports at once
  const auto deadline = Clock::now() + limit;
  for (std::size_t left = actors.size(); left > 0;) {
    const auto rest = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    bool late = rest.count() <= 0;
    if (!late)
      self->receive([&](caf::down_msg&) { --left; }, caf::after(rest) >> [&] { late = true; });
    if (late) return;  // an actor stuck in a blocking call: the host's ~actor_system waits for it
  }
}

// Runtimes alive in the process. When the last one ends, the GPU layer lets go of what it keeps
// (device actors, their streams and scratch, NCCL communicators, pinned buffers): a program that
// returns from main afterwards leaves nothing of ours running into CUDA's own exit.
std::atomic<int>& live_runtimes() {
  static std::atomic<int> n{0};
  return n;
}
constexpr auto kGpuReleaseTime = std::chrono::seconds(5);

} // namespace

RuntimeImpl::RuntimeImpl() {
  core = std::make_shared<LocalServerCore>();
  live_runtimes().fetch_add(1);
}

// In the host's system the data path is the same: peers enter the server's core directly and the
// server and peer actors run on threads of their own, so the host's scheduler policy never sits
// between a peer and its op.
RuntimeImpl::RuntimeImpl(caf::actor_system& host) : sys(&host), in_host(true) {
  live_runtimes().fetch_add(1);
  core = std::make_shared<LocalServerCore>();
  server = sys->spawn<caf::detached>(local_server, core);
}

Result<caf::actor_system*> RuntimeImpl::system_for(const Config* config) {
  std::lock_guard<std::mutex> lk(system_mu);
  const bool remote = config && config->num_nodes > 0;
  const TlsFiles tls = config ? TlsFiles{config->tls_certificate, config->tls_key, config->tls_ca} : TlsFiles{};
  if (sys) {
    if (remote)
      if (auto why = remoting_problem(*sys, tls); !why.empty())
        return Status(Errc::invalid_config,
                      "multi-node mode (num_nodes " + std::to_string(config->num_nodes) + "): " + why +
                          (in_host ? "; call chorus::prepare_actor_system(cfg, config) on the host's actor_system_config "
                                     "before constructing the actor_system (it loads cfg.load<caf::io::middleman>() "
                                     "and what else chorus needs)"
                                   : "; this Runtime's actor system was started for one process before the "
                                     "multi-node registration: make that registration the Runtime's first use"));
    return sys;
  }
  {
    std::lock_guard<std::mutex> lk2(actors_mu);
    if (stopped || in_host) return Status(Errc::reset, "the runtime has been destroyed");
  }
  cfg = std::make_unique<caf::actor_system_config>();
  if (remote) configure_remoting(*cfg, kNodeHeartbeat, tls, kNodeLinkSilence, LinkEnd::connecting);
  // The sharing policy wakes an idle worker through a condition variable at once; the default
  // work-stealing policy lets idle workers sleep in long polls, which costs hundreds of µs.
  cfg->set("scheduler.policy", caf::atom("sharing"));
  cfg->set("scheduler.max-threads", 2);
  cfg->set("logger.verbosity", caf::atom("quiet"));
  own_system = std::make_unique<caf::actor_system>(*cfg);
  sys = own_system.get();
  // Detached: the server has its own thread, so peer threads never wait behind other actors.
  auto s = sys->spawn<caf::detached>(local_server, core);
  std::lock_guard<std::mutex> lk2(actors_mu);
  if (stopped) {  // shut down meanwhile: it collected no server to stop, so this one stops now
    caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
    return Status(Errc::reset, "the runtime has been destroyed");
  }
  server = std::move(s);
  return sys;
}

RuntimeImpl::~RuntimeImpl() {
  shutdown();
  drop_hosted_orchestrator();  // one a join made after shutdown, if any
}

void RuntimeImpl::shutdown() {
  std::shared_ptr<RuntimeImpl> successor;
  {
    std::lock_guard<std::mutex> lk(global_mu);  // elastic.cpp makes `next` under it, or not at all now
    no_next = true;
    successor = next;
  }
  if (successor) successor->shutdown();  // it runs in this one's actor system: first
  std::vector<caf::actor> ours;
  {
    std::lock_guard<std::mutex> lk(actors_mu);
    if (stopped) return;
    stopped = true;
    for (auto& [id, a] : owned) ours.push_back(std::move(a));
    owned.clear();
    // Peers that outlive the runtime keep this object: it must not keep the server alive, or the
    // actor system could not end (it waits until every handle to a detached actor is gone).
    if (server) ours.push_back(caf::actor_cast<caf::actor>(std::move(server)));  // none once retired
    server = nullptr;
  }
  close_arena();  // a peer waiting there goes on to the closed server's answer at once
  core->close(Status(Errc::reset, "the runtime has been destroyed"));
  std::shared_ptr<GlobalClient> g;
  {
    std::lock_guard<std::mutex> lk(global_mu);
    g = global;
  }
  if (g) g->close();  // says goodbye and stops its threads: not under the lock
  drop_hosted_orchestrator();  // after our goodbye: the other nodes then hear it is gone
  for (auto& a : ours) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  // Take the system out under the lock (no new one is made: stopped is set) and wait for its
  // actors outside it: a peer actor still registering may need system_for meanwhile.
  std::unique_ptr<caf::actor_system> own;
  caf::actor_system* host = nullptr;
  {
    std::lock_guard<std::mutex> lk(system_mu);
    own = std::move(own_system);
    if (in_host) host = sys;
    sys = nullptr;
  }
  if (own) {
    ours.clear();  // the same: our own handles would keep ~actor_system waiting
    own->await_all_actors_done();
    own.reset();
  } else if (host) {
    await_exits(*host, ours, grace);
  }
  std::shared_ptr<Trace> t;
  {
    std::lock_guard<std::mutex> lk(global_mu);
    t = trace;
  }
  // The file, outside every lock (it logs a failure); a successor shares its first runtime's
  // trace, which that runtime writes last.
  if (t && rejoin.kind == RejoinData::Kind::none) (void)t->write();
  if (live_runtimes().fetch_sub(1) == 1) (void)gpu::release_all(Clock::now() + kGpuReleaseTime);
}

void RuntimeImpl::retire(const Status& why) {
  // The runtime before keeps this epoch's world handles no more: they go with the user's.
  std::map<PeerId, std::shared_ptr<PeerState>> handles;
  if (auto before = prev.lock()) {
    std::lock_guard<std::mutex> lk(before->global_mu);
    handles.swap(before->successors);
    before->successors_gone = true;
  }
  handles.clear();  // outside the lock
  close_arena();
  core->close(why);
  std::shared_ptr<GlobalClient> g;
  {
    std::lock_guard<std::mutex> lk(global_mu);
    g = std::move(global);  // the old epoch's connections and rings go with the last handle of it
  }
  if (g) g->retire(why);  // goodbye to the old epoch's nodes; the orchestrator forgot this actor already
  caf::actor server_now;
  {
    std::lock_guard<std::mutex> lk(actors_mu);
    server_now = caf::actor_cast<caf::actor>(std::move(server));  // it stops now: shutdown() need not wait for it
    server = nullptr;
  }
  if (server_now) caf::anon_send_exit(server_now, caf::exit_reason::user_shutdown);
}

bool RuntimeImpl::own(const caf::actor& a) {
  bool taken = false;
  {
    std::lock_guard<std::mutex> lk(actors_mu);
    if (!stopped) taken = owned.emplace(a.id(), a).second;
  }
  if (!taken) {
    caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    return false;
  }
  // Outside the lock: on an actor that is already gone the functor runs at once.
  std::weak_ptr<RuntimeImpl> weak = shared_from_this();
  caf::actor_cast<caf::abstract_actor*>(a)->attach_functor([weak, id = a.id()] {
    if (auto rt = weak.lock()) {
      std::lock_guard<std::mutex> lk(rt->actors_mu);
      rt->owned.erase(id);
    }
  });
  return true;
}

namespace {
// Waits for the reply to a request in the core; past the deadline, expires the request itself.
// `start`: when the op began (it may have waited in the arena first); its timeout counts from there.
Status await_reply(LocalServerCore& core, const std::shared_ptr<Reply>& reply, std::chrono::milliseconds timeout,
                   unsigned peers, Clock::time_point start) {
  const Patience patience = patience_for(peers);
  // Half the timeout gone: say (warn, op) what the request still waits for, once for all its
  // peers (the core tells the first of them, and the op's other nodes which ranks are missing).
  if (!reply->done.wait_at_least(1, start + timeout / 2, patience)) {
    LogWhere where;
    const std::string what = core.at_half_time(reply->timer, where);
    if (!what.empty() && log_on(LogLevel::warn, Subsys::op))
      log_line(LogLevel::warn, Subsys::op, where,
               what + " after " + std::to_string((timeout / 2).count()) + " ms, half the op's timeout");
  }
  if (!reply->done.wait_at_least(1, start + timeout, patience)) {
    core.on_timeout(reply->timer, timeout);  // fails the request for everyone who came, naming who did not
    if (!reply->done.wait_at_least(1, Clock::now() + RuntimeImpl::grace))
      return {Errc::timeout, "the local server did not answer within " +
                                 std::to_string((timeout + RuntimeImpl::grace).count()) + " ms"};
  }
  return reply->status;
}
} // namespace

Status RuntimeImpl::await_op(const std::shared_ptr<Reply>& reply, std::chrono::milliseconds timeout, unsigned peers,
                             Clock::time_point start) {
  return await_reply(*core, reply, timeout, peers, start);
}

Status RuntimeImpl::submit_group(Call& call, std::chrono::milliseconds timeout, unsigned peers) {
  auto reply = call.reply;
  core->on_group(std::move(call));
  return await_reply(*core, reply, timeout, peers, Clock::now());
}

Result<std::shared_ptr<GlobalClient>> RuntimeImpl::join_collective(const Config& config, caf::actor_system& sys) {
  Config c = config;
  const auto deadline = Clock::now() + config.join_limit();
  if (config.host_orchestrator) {
    std::string host = "127.0.0.1";
    uint16_t port = 0;  // with a rendezvous file: a free one, which the file then names
    if (c.rendezvous_file.empty() && !split_host_port(c.orchestrator_address, host, port))
      return Status(Errc::invalid_config, "orchestrator_address '" + c.orchestrator_address + "' is not host:port");
    if (!c.rendezvous_file.empty() && c.secret.empty()) {  // the file hands the other ranks one
      auto drawn = draw_secret();
      if (!drawn) return drawn.status();
      c.secret = *drawn;
    }
    // A name other hosts use (MASTER_ADDR=node1) may resolve here to loopback (Debian maps the
    // host name to 127.0.1.1): listen on every interface, as torch's own store does, unless the
    // name is loopback itself (every rank on this host).
    auto h = HostedOrchestrator::start({is_loopback_host(host) ? host : std::string("0.0.0.0"), port, c.num_nodes, c.secret,
                                        c.join_limit(), TlsFiles{c.tls_certificate, c.tls_key, c.tls_ca}});
    if (!h) return h.status();
    const uint16_t listening = (*h)->port();
    {
      std::lock_guard<std::mutex> lk(global_mu);
      hosted = std::move(*h);
    }
    {
      std::lock_guard<std::mutex> lk(actors_mu);
      if (stopped) return Status(Errc::reset, "the runtime has been destroyed");  // ensure_global drops it
    }
    c.orchestrator_address = host_port(host, listening);
    if (!c.rendezvous_file.empty()) {
      if (auto s = write_rendezvous(c.rendezvous_file, {listening, c.secret}); !s) return s;
      std::lock_guard<std::mutex> lk(global_mu);
      rendezvous_written = c.rendezvous_file;
    }
    CHORUS_LOG(info, init, LogWhere{}, "hosting the orchestrator at " + c.orchestrator_address);
  } else if (!c.rendezvous_file.empty()) {
    auto r = read_rendezvous(c.rendezvous_file, deadline);
    if (!r) return r.status();
    c.orchestrator_address = "127.0.0.1:" + std::to_string(r->port);
    if (c.secret.empty()) c.secret = r->secret;
  }
  c.rendezvous_file.clear();
  c.join_timeout = std::max(std::chrono::milliseconds(1),
                            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
  RejoinData j;
  std::shared_ptr<RuntimeImpl> before;
  {
    std::lock_guard<std::mutex> lk(global_mu);
    j = rejoin;
    if (j.kind != RejoinData::Kind::none) before = prev.lock();
  }
  // The next epoch registers over the link the previous one reached the orchestrator by: no new
  // door passage or CAF handshake (a third of a shrink's time on a loaded host), listens on the
  // data port it had, and in a shrink keeps its links to the members that stay.
  std::shared_ptr<GlobalClient> was;
  if (before) {
    std::lock_guard<std::mutex> lk(before->global_mu);
    was = before->global;
  }
  return GlobalClient::start(c, sys, j, was.get());
}

void RuntimeImpl::drop_hosted_orchestrator() {
  std::unique_ptr<HostedOrchestrator> h;
  std::string file;
  {
    std::lock_guard<std::mutex> lk(global_mu);
    h = std::move(hosted);
    file.swap(rendezvous_written);
  }
  if (!file.empty()) ::unlink(file.c_str());
  h.reset();  // stops its actor system: not under the lock
}

Status RuntimeImpl::ensure_global(const Config& config) {
  auto sys = system_for(&config);
  if (!sys) return sys.status();
  bool first = false;
  {
    std::lock_guard<std::mutex> lk(global_mu);
    if (join_outcome) return *join_outcome;
    if (auto why = core->closed()) return *why;
    first = !joining;
    joining = true;
  }
  if (!first) {  // another peer joins for the node: its outcome is ours
    if (!joined.wait_at_least(1, Clock::now() + config.join_limit() + grace))
      return {Errc::timeout, "the node's join of the collective did not end within " +
                                 std::to_string((config.join_limit() + grace).count()) + " ms"};
    std::lock_guard<std::mutex> lk(global_mu);
    return *join_outcome;
  }
  // Joining blocks (up to the join timeout): not under global_mu.
  auto g = join_collective(config, **sys);
  if (g) core->set_global(*g);
  if (g && flight) {
    flight->set_node((*g)->node_id());
    flight->set_world((*g)->total_peers());
  }
  if (g) {
    // The node actor answers the orchestrator's status requests from this (weak references: the
    // client owns the node actor, which owns the source).
    std::weak_ptr<GlobalClient> wg = *g;
    std::weak_ptr<LocalServerCore> wc = core;
    (*g)->set_status_source([wg, wc, fl = flight] {
      auto client = wg.lock();
      auto c = wc.lock();
      if (!client || !c) return encode_node_status(NodeStatusData{0, "", 0, {}, "shutting down"});
      return encode_node_status(node_status(fl.get(), *c, *client));
    });
  }
  if (g && trace) trace->set_node((*g)->node_id(), (*g)->offset());
  {
    std::lock_guard<std::mutex> lk(global_mu);
    if (g) global = *g;
    join_outcome = g.status();
  }
  if (!g) drop_hosted_orchestrator();  // its job cannot be had now: the port goes too
  joined.set(1);
  bool stopped_meanwhile = false;
  {
    std::lock_guard<std::mutex> lk(actors_mu);
    stopped_meanwhile = stopped;
  }
  // Shut down while it joined: shutdown() found no client to close, so this one leaves now (its
  // node actor would otherwise keep the actor system from ending), and no orchestrator it hosts
  // outlives the Runtime's shutdown.
  if (g && stopped_meanwhile) (*g)->close();
  if (stopped_meanwhile) drop_hosted_orchestrator();
  return g.status();
}

Result<Peer> RuntimeImpl::register_peer(PeerId id, const Config& config) {
  if (auto s = config.validate(); !s) return s;
  configure_log(config.debug, config.debug_subsys);  // validated above
  // A Runtime is one node of a multi-node collective or one process's collective, for its whole
  // life: its local server cannot serve both (ops of a joined node go to its global client), and
  // a node stays a member of its job until the Runtime goes. The first registration that gets
  // past the checks of its actor system decides.
  const bool multi = config.num_nodes > 0;
  auto mode_clash = [&]() -> std::optional<Status> {
    if (!multi_node || *multi_node == multi) return std::nullopt;
    return Status(Errc::invalid_config,
                  std::string("this Runtime serves a ") + (*multi_node ? "multi-node" : "one-process") +
                      " collective; a " + (multi ? "multi-node" : "one-process") + " registration (num_nodes " +
                      std::to_string(config.num_nodes) + ") needs a Runtime of its own");
  };
  {
    std::lock_guard<std::mutex> lk(global_mu);
    if (auto clash = mode_clash()) return *clash;
  }
  if (auto sys = system_for(&config); !sys) return sys.status();
  {
    std::lock_guard<std::mutex> lk(global_mu);
    if (auto clash = mode_clash()) return *clash;
    if (!flight) {
      auto f = FlightRecorder::for_config(config);
      if (!f) return f.status();  // a wrong CHORUS_FLIGHT_RECORDER
      flight = *f;
    }
    if (!trace) {
      auto t = Trace::for_config(config);
      if (!t) return t.status();  // a wrong CHORUS_TRACE
      trace = *t;
    }
    multi_node = multi;
  }
  if (config.num_nodes > 0)
    if (auto s = ensure_global(config); !s) return s;
  Call call;
  call.message = encode_register({protocol_version(), id, config});
  auto reply = call.reply;
  if (auto s = enter(&LocalServerCore::on_register, call, config.timeout); !s) return s;
  auto st = std::make_shared<PeerState>();
  {
    std::lock_guard<std::mutex> lk(global_mu);
    st->flight = flight;
    st->trace = trace ? trace->peer(id) : nullptr;
  }
  st->epoch = reply->epoch;
  st->rank = id;
  uint32_t total = config.num_devices;
  if (config.num_nodes > 0) {
    {
      std::lock_guard<std::mutex> lk(global_mu);
      st->global = global;
    }
    if (!st->global)  // retired meanwhile (a shrink or grow of another local peer): its core says why
      return core->closed().value_or(Status(Errc::revoked, "this node left the collective for its next epoch"));
    st->offset = st->global->offset();
    st->rank = st->offset + id;
    total = st->global->total_peers();
    if (auto seat = st->global->arena(); seat && seat->arena.peers() == total) st->arena = std::move(seat);
  } else {
    st->arena = arena_for(reply->epoch, config.num_devices);
  }
  for (uint32_t i = 0; i < total; ++i) st->members.push_back(i);
  st->rt = shared_from_this();
  st->id = id;
  st->config = config;
  return PeerAccess::make(std::move(st));
}

std::shared_ptr<ArenaSeat> RuntimeImpl::arena_for(uint64_t epoch, uint32_t peers) {
  std::lock_guard<std::mutex> lk(global_mu);
  if (arena && arena_epoch == epoch && arena->arena.peers() == peers) return arena;
  if (arena && arena_epoch == epoch) return nullptr;  // peers of one generation disagree: the server says so
  if (arena) arena->arena.close();
  arena = peer_impl::local_arena(peers);
  arena_epoch = epoch;
  return arena;
}

void RuntimeImpl::close_arena() {
  std::lock_guard<std::mutex> lk(global_mu);
  if (arena) arena->arena.close();
  arena = nullptr;
}

Runtime::Runtime() : impl_(std::make_shared<RuntimeImpl>()) {}
namespace {
caf::actor_system& named(const HostSystem& host) {
  if (!host.system) throw std::invalid_argument("chorus::Runtime: the HostSystem names no actor system");
  return *host.system;
}
} // namespace

Runtime::Runtime(const HostSystem& host) : impl_(std::make_shared<RuntimeImpl>(named(host))) {}
// Peers may outlive the runtime (they share its internals); they must fail fast, not hang.
Runtime::~Runtime() { impl_->shutdown(); }

Result<Peer> Runtime::register_peer(PeerId id, const Config& config) { return impl_->register_peer(id, config); }

Status Runtime::reset() {
  if (!impl_->has_system()) return Status::ok();  // nobody registered: nothing to reset
  impl_->close_arena();  // the old generation's peers meet the server's refusal instead
  Call call;
  call.message = encode_peer_only(UINT32_MAX, true);
  return impl_->submit(reset_atom::value, call, std::chrono::milliseconds(10000));
}

caf::actor_system& actor_system_of(Runtime& runtime) { return RuntimeAccess::impl(runtime).system(); }

void prepare_actor_system(caf::actor_system_config& cfg, const Config& config) {
  load_remoting(cfg, kNodeHeartbeat, TlsFiles{config.tls_certificate, config.tls_key, config.tls_ca}, kNodeLinkSilence,
                LinkEnd::connecting);
}

} // namespace chorus
