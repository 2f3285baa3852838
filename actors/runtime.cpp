#include <chorus/runtime.hpp>

#include "actors/global_client/global_client.hpp"
#include "actors/local_server/local_server.hpp"
#include "actors/runtime_impl.hpp"
#include "messages/peer_codec.hpp"

namespace chorus {

RuntimeImpl::RuntimeImpl() {
  // The sharing policy wakes an idle worker through a condition variable at once; the default
  // work-stealing policy lets idle workers sleep in long polls, which costs hundreds of µs.
  cfg.set("scheduler.policy", caf::atom("sharing"));
  cfg.set("scheduler.max-threads", 2);
  cfg.set("logger.verbosity", caf::atom("quiet"));
  system = std::make_unique<caf::actor_system>(cfg);
  core = std::make_shared<LocalServerCore>();
  // Detached: the server has its own thread, so peer threads never wait behind other actors.
  server = system->spawn<caf::detached>(local_server_sharing, core);
}

RuntimeImpl::~RuntimeImpl() { shutdown(); }

void RuntimeImpl::shutdown() {
  if (!system) return;
  core->close(Status(Errc::reset, "the runtime has been destroyed"));
  {
    std::lock_guard<std::mutex> lk(global_mu);
    if (global) global->close();
  }
  {
    std::lock_guard<std::mutex> lk(owned_mu);
    for (auto& a : owned) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    owned.clear();
  }
  caf::anon_send_exit(server, caf::exit_reason::user_shutdown);
  server = nullptr;
  system->await_all_actors_done();
  system.reset();
}

namespace {
// Enters the core directly and waits for the reply; past the deadline, expires the request itself.
template <class Enter>
Status enter_and_wait(LocalServerCore& core, Call& call, std::chrono::milliseconds timeout, unsigned peers,
                      Enter enter) {
  auto reply = call.reply;
  (core.*enter)(std::move(call));
  if (!reply->done.wait_at_least(1, Clock::now() + timeout, spin_budget_for(peers))) {
    core.on_timeout(reply->timer);  // fails the request for everyone who came, naming who did not
    if (!reply->done.wait_at_least(1, Clock::now() + RuntimeImpl::grace))
      return {Errc::timeout, "the local server did not answer within " +
                                 std::to_string((timeout + RuntimeImpl::grace).count()) + " ms"};
  }
  return reply->status;
}
} // namespace

Status RuntimeImpl::submit_op(Call& call, std::chrono::milliseconds timeout, unsigned peers) {
  return enter_and_wait(*core, call, timeout, peers, &LocalServerCore::on_op);
}

Status RuntimeImpl::submit_group(Call& call, std::chrono::milliseconds timeout, unsigned peers) {
  return enter_and_wait(*core, call, timeout, peers, &LocalServerCore::on_group);
}

Status RuntimeImpl::ensure_global(const Config& config) {
  std::lock_guard<std::mutex> lk(global_mu);
  if (global) return Status::ok();
  if (auto why = core->closed()) return *why;
  auto g = GlobalClient::start(config);
  if (!g) return g.status();
  global = std::move(*g);
  core->set_global(global);
  return Status::ok();
}

Runtime::Runtime() : impl_(std::make_shared<RuntimeImpl>()) {}
// Peers may outlive the runtime (they share its internals); they must fail fast, not hang.
Runtime::~Runtime() { impl_->shutdown(); }

Result<Peer> Runtime::register_peer(PeerId id, const Config& config) {
  if (auto s = config.validate(); !s) return s;
  if (config.num_nodes > 0)
    if (auto s = impl_->ensure_global(config); !s) return s;
  Call call;
  call.message = encode_register({protocol_version(), id, config});
  auto reply = call.reply;
  if (auto s = impl_->submit(register_atom::value, call, config.timeout); !s) return s;
  auto st = std::make_shared<PeerState>();
  st->epoch = reply->epoch;
  st->rank = id;
  uint32_t total = config.num_devices;
  if (config.num_nodes > 0) {
    st->global = impl_->global;
    st->offset = st->global->offset();
    st->rank = st->offset + id;
    total = st->global->total_peers();
  }
  for (uint32_t i = 0; i < total; ++i) st->members.push_back(i);
  st->rt = impl_;
  st->id = id;
  st->config = config;
  return PeerAccess::make(std::move(st));
}

Status Runtime::reset() {
  Call call;
  call.message = encode_peer_only(UINT32_MAX, true);
  return impl_->submit(reset_atom::value, call, std::chrono::milliseconds(10000));
}

} // namespace chorus
