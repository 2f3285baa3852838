#include "actors/orchestrator/hosted.hpp"

#include <thread>

#include "actors/orchestrator/orchestrator.hpp"
#include "actors/orchestrator/published.hpp"

namespace chorus {

namespace {
// As the daemon's default: a node silent for four beats is lost.
constexpr std::chrono::milliseconds kHostedHeartbeat{1000};
} // namespace

struct HostedOrchestrator::State {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  orchestrator_actor orch;
  std::unique_ptr<PublishedOrchestrator> published;
};

HostedOrchestrator::HostedOrchestrator(std::unique_ptr<State> s) : state_(std::move(s)) {}

Result<std::unique_ptr<HostedOrchestrator>> HostedOrchestrator::start(const Options& opts) {
  auto s = std::make_unique<State>();
  configure_remoting(s->cfg, kHostedHeartbeat, opts.tls, {}, LinkEnd::accepting);
  s->cfg.set("logger.verbosity", caf::atom("quiet"));
  s->sys = std::make_unique<caf::actor_system>(s->cfg);
  OrchestratorCore::Options o;
  o.expected_nodes = opts.nodes;
  o.timeout = opts.admission;
  s->orch = s->sys->spawn(orchestrator, o);
  auto published = PublishedOrchestrator::publish(*s->sys, s->orch, {opts.host, opts.port, opts.secret});
  if (!published) {
    caf::anon_send_exit(s->orch, caf::exit_reason::user_shutdown);
    return Status(published.status().code(),
                  "cannot host the orchestrator at " + opts.host + ":" + std::to_string(opts.port) + ": " +
                      published.status().message());
  }
  s->published = std::move(*published);
  return std::unique_ptr<HostedOrchestrator>(new HostedOrchestrator(std::move(s)));
}

uint16_t HostedOrchestrator::port() const { return state_->published->port(); }

bool HostedOrchestrator::wait_until_left(std::chrono::milliseconds limit) const {
  // Asked every few ms: a teardown's wait, once per job, not an op's.
  const auto deadline = std::chrono::steady_clock::now() + limit;
  caf::scoped_actor self{*state_->sys};
  for (;;) {
    uint64_t registered = 1;
    self->request(state_->orch, std::chrono::seconds(1), caf::get_atom::value)
        .receive([&](uint64_t, uint64_t n, bool) { registered = n; }, [](caf::error&) {});
    if (registered == 0) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

HostedOrchestrator::~HostedOrchestrator() {
  state_->published.reset();  // the door first: nothing new comes in while the actor stops
  caf::anon_send_exit(state_->orch, caf::exit_reason::user_shutdown);
  state_->orch = nullptr;
  state_->sys.reset();  // waits for its actors
}

} // namespace chorus
