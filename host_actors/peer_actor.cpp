// Peer actors (chorus/peer_actor.hpp): one detached actor per peer handle. It registers on its own
// thread, answers every request with the blocking Peer API there, owns the peer's gradient sync,
// and releases the peer when it exits.
#include <chorus/peer_actor.hpp>

#include "host_actors/peer_actor_calls.hpp"
#include "runtime/runtime_impl.hpp"

namespace chorus {

namespace {

bool same_options(const GradSyncOptions& a, const GradSyncOptions& b) {
  return a.bucket_bytes == b.bucket_bytes && a.op == b.op && a.timeout == b.timeout && a.copy_back == b.copy_back &&
         a.device == b.device;
}

struct PeerActorState {
  Status registration = Status(Errc::not_registered, "the peer actor has not registered");
  Peer peer;
  bool world = true;  // the world handle finishes on exit; a group handle destroys its share
  bool released = false;  // finished or destroyed through a request
  std::unique_ptr<GradientSync> grad;
  GradSyncOptions grad_options;
  bool step_open = false;  // a gradient-sync step runs: the sync owns the peer until sync()

  static constexpr const char* name = "chorus.peer";

  // Runs in the actor's exit (CAF destroys the state before it tells the monitors), so a
  // down_msg means the peer is gone. The sync goes first: its thread may still use the peer.
  ~PeerActorState() {
    grad.reset();
    if (!registration || released) return;
    if (world)
      (void)peer.finish();
    else
      (void)peer.destroy();
  }

  // What a request that runs an op gets instead, if anything.
  std::optional<Status> refuse() const {
    if (!registration) return registration;
    if (step_open)
      return Status(Errc::invalid_argument, "peer " + std::to_string(peer.id()) +
                                                ": a gradient-sync step is in progress (send GradCall::sync() first)");
    return std::nullopt;
  }
};

using self_ptr = peer_actor::stateful_pointer<PeerActorState>;

peer_actor::behavior_type serve(self_ptr self, std::shared_ptr<RuntimeImpl> rt);

// The actor of a registered handle: a group actor, created by its parent's GroupCall.
peer_actor::behavior_type group_actor(self_ptr self, std::shared_ptr<RuntimeImpl> rt, Peer group) {
  self->state.peer = std::move(group);
  self->state.world = false;
  self->state.registration = Status::ok();
  return serve(self, std::move(rt));
}

// The actor of peer `id`. CAF runs this on the actor's own thread (detached), after spawn has
// returned: registration blocks nobody but this actor, whose requests wait in its mailbox.
peer_actor::behavior_type world_actor(self_ptr self, std::shared_ptr<RuntimeImpl> rt, PeerId id, Config config) {
  auto p = rt->register_peer(id, config);
  self->state.registration = p.status();
  if (p) self->state.peer = std::move(*p);
  return serve(self, std::move(rt));
}

peer_actor owned_by(RuntimeImpl& rt, peer_actor a) {
  rt.own(caf::actor_cast<caf::actor>(a));  // stopped with the runtime
  return a;
}

GroupDone on_group(self_ptr self, const std::shared_ptr<RuntimeImpl>& rt, GroupCall& c) {
  auto& st = self->state;
  if (auto no = st.refuse()) return {*no, peer_actor{}};
  if (c.op == GroupOp::destroy) {
    Status s = st.peer.destroy();
    if (s) st.released = true;
    return {s, peer_actor{}};
  }
  auto g = peer_actor_calls::create_group(st.peer, c);
  if (!g) return {g.status(), peer_actor{}};
  if (g->size() == 0) return {Status::ok(), peer_actor{}};  // this peer joins no group
  // Detached like its parent: ops of the group may run while the parent runs others.
  return {Status::ok(), owned_by(*rt, self->home_system().spawn<caf::detached>(group_actor, rt, std::move(*g)))};
}

GradDone on_grad(PeerActorState& st, GradCall& c) {
  if (!st.registration) return {st.registration, Tensor()};
  auto none = [](const char* what) {
    return GradDone{{Errc::invalid_argument, std::string(what) + ": no parameters registered (send GradCall::register_params first)"},
                    Tensor()};
  };
  switch (c.op) {
    case GradOp::register_params:
      if (!st.grad) {
        st.grad = std::make_unique<GradientSync>(st.peer, c.options);
        st.grad_options = c.options;
      } else if (!same_options(st.grad_options, c.options)) {
        return {{Errc::invalid_argument, "register_params: this peer actor's gradient sync was created with other "
                                         "options; every register_params must pass the same ones"},
                Tensor()};
      }
      return {st.grad->register_params(std::move(c.params)), Tensor()};
    case GradOp::submit: {
      if (!st.grad) return none("submit");
      Status s = st.grad->submit(c.id, c.grad);
      if (s) st.step_open = true;
      return {s, Tensor()};
    }
    case GradOp::sync:
      if (!st.grad) return none("sync");
      st.step_open = false;
      return {st.grad->sync(), Tensor()};
    case GradOp::reduced: {
      if (!st.grad) return none("reduced");
      auto r = st.grad->reduced(c.id);
      if (!r) return {r.status(), Tensor()};
      return {Status::ok(), *r};
    }
  }
  return {{Errc::invalid_argument, "unknown gradient-sync call " + std::to_string(static_cast<int>(c.op))}, Tensor()};
}

peer_actor::behavior_type serve(self_ptr self, std::shared_ptr<RuntimeImpl> rt) {
  using namespace peer_actor_calls;
  return {
      [self](ReadyCall) -> ReadyDone {
        auto& st = self->state;
        if (!st.registration) return {st.registration, 0, 0, 0, 0, 0, {}};
        return ready(st.peer);
      },
      [self](OpCall& c) -> OpDone {
        if (auto no = self->state.refuse()) return {*no, c.output.defined() ? c.output : c.input};
        return run(self->state.peer, c);
      },
      [self](ByDataCall& c) -> ByDataDone {
        if (auto no = self->state.refuse()) return {*no, Tensor()};
        return run(self->state.peer, c);
      },
      [self](ObjectCall& c) -> ObjectDone {
        if (auto no = self->state.refuse()) return {*no, {}};
        return run(self->state.peer, c);
      },
      [self](TensorsCall& c) -> TensorsDone {
        if (auto no = self->state.refuse())  // a list comes back as it went, as OpCall's buffer does
          return {*no, c.op == TensorsOp::all_reduce_coalesced ? std::move(c.list) : std::vector<Tensor>{}};
        return run(self->state.peer, c);
      },
      [self, rt](GroupCall& c) -> GroupDone { return on_group(self, rt, c); },
      [self](GradCall& c) -> GradDone { return on_grad(self->state, c); },
  };
}

} // namespace

peer_actor spawn_peer_actor(Runtime& rt, PeerId id, const Config& config) {
  auto impl = RuntimeAccess::impl(rt).shared_from_this();
  // A multi-node config makes the runtime's system with remoting, if this is its first use. When
  // it cannot (the system in place lacks it), the actor's registration says why.
  auto sys = impl->system_for(&config);
  caf::actor_system& home = sys.is_ok() ? **sys : impl->system();  // the caller holds the Runtime
  // Detached: registration and every blocking call run on the actor's own thread.
  return owned_by(*impl, home.spawn<caf::detached>(world_actor, impl, id, config));
}

} // namespace chorus
