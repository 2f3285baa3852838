#include "join.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <optional>

#include <pybind11/pybind11.h>

#include "actors/orchestrator/hosted.hpp"
#include "core/env.hpp"
#include "core/host_names.hpp"
#include "core/secret.hpp"
#include "core/settings.hpp"
#include "errors.hpp"

namespace chorus::python {

namespace {

std::mutex registry_mu;
std::weak_ptr<World> the_world;              // the World up now
std::vector<std::weak_ptr<World>> own_groups;  // groups of their own (join_group), for shutdown_all
bool joining = false;            // a join is under way (it blocks, so not under the lock)

// How long rank 0 keeps serving, once its own node is gone, for the others to leave.
constexpr std::chrono::milliseconds kLingerCap{30000};

std::string text_of(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }
std::vector<uint8_t> bytes_of(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "";
  return name;
}

// The store's keys, under the prefix torch gives the group.
const std::string kHostKey = "chorus/host/", kOrchestratorKey = "chorus/orchestrator", kSecretKey = "chorus/secret";

// What a launcher (chorus-run, a daemon's job) passes this process, which must run one peer.
Config launcher_config() {
  Config c = value_of(Config::from_env());
  if (c.num_devices != 1)
    throw Error(Status(Errc::invalid_config, "torch.distributed runs one peer per process, but CHORUS_PEERS is " +
                                                 std::to_string(c.num_devices) + " (chorus-run --peers 1)"));
  return c;
}

// One join at a time, and none while a World is up: `busy` says why not.
class JoinTurn {
 public:
  explicit JoinTurn(const char* busy) {
    std::lock_guard<std::mutex> reg(registry_mu);
    auto up = the_world.lock();
    if ((up && !up->is_down()) || joining) throw Error(Status(Errc::invalid_config, busy));
    joining = true;
  }
  ~JoinTurn() {
    std::lock_guard<std::mutex> reg(registry_mu);
    joining = false;
  }
  JoinTurn(const JoinTurn&) = delete;
  JoinTurn& operator=(const JoinTurn&) = delete;
};

} // namespace

std::shared_ptr<World> World::join(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                   std::chrono::milliseconds timeout) {
  JoinTurn turn("this process is in a chorus collective already (one default group at a time: "
                "destroy_process_group() first, and drop what still holds a group of the old one, "
                "such as a DistributedDataParallel: the collective lasts as long as any of its groups)");
  return meet(store, rank, size, timeout, false);
}

std::shared_ptr<World> World::join_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                         std::chrono::milliseconds timeout) {
  return meet(store, rank, size, timeout, true);
}

std::shared_ptr<World> World::meet(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                   std::chrono::milliseconds timeout, bool own_group) {
  if (size < 1 || rank < 0 || rank >= size)
    throw Error(Status(Errc::invalid_config, "rank " + std::to_string(rank) + " of " + std::to_string(size)));
  std::shared_ptr<World> w(new World);
  w->timeout_ = timeout;
  Config c;
  c.num_devices = 1;
  c.timeout = timeout;
  if (size > 1 && !own_group && setting_text(SettingId::orchestrator)) {
    // Launched by chorus-run (or beside a chorus-orchestrator daemon): its orchestrator, its
    // secret, its numbering, which must be torch's.
    c = launcher_config();
    if (c.num_nodes != static_cast<uint32_t>(size) || c.rank != rank)
      throw Error(Status(Errc::invalid_config, "torch.distributed says rank " + std::to_string(rank) + " of " +
                                                   std::to_string(size) + ", chorus's launcher rank " +
                                                   std::to_string(c.rank) + " of " + std::to_string(c.num_nodes)));
    c.timeout = timeout;
    c.join_timeout = timeout;
  } else if (size > 1) {
    c.num_nodes = static_cast<uint32_t>(size);
    c.rank = rank;
    c.join_timeout = timeout;
    const std::string me = host_name();
    store->set(kHostKey + std::to_string(rank), bytes_of(me));
    if (rank == 0) {
      bool one_host = true;
      for (int r = 1; r < size; ++r) one_host = one_host && text_of(store->get(kHostKey + std::to_string(r))) == me;
      // A group of its own draws its own: the store it is published in is not the launcher's to
      // see (under chorus-run, CHORUS_SECRET is the job's).
      std::string secret = own_group ? std::string() : secret_from_env();
      if (secret.empty()) secret = value_of(draw_secret());
      // Every rank here: loopback only. Else the address others reach: CHORUS_NODE_ADDRESS,
      // MASTER_ADDR (torch's own store is there, with the default group's rank 0), for a group of
      // its own (whose rank 0 may be on another host) this host's address toward MASTER_ADDR (the
      // job's network), else this host's first address that is not loopback; the door listens on
      // every interface, as torch's store does.
      std::string host = "127.0.0.1";
      if (!one_host) {
        const auto master = env_text("MASTER_ADDR");
        const std::string guess = own_group && master ? address_toward(*master, false) : master.value_or("");
        host = setting_text(SettingId::node_address).value_or(guess.empty() ? first_address(me, true) : guess);
        if (host.empty())
          throw Error(Status(Errc::invalid_config, "rank 0 cannot tell an address of " + me +
                                                       " that the other hosts reach; set CHORUS_NODE_ADDRESS"));
      }
      HostedOrchestrator::Options o;
      o.host = one_host ? host : "0.0.0.0";
      o.nodes = static_cast<uint32_t>(size);
      o.secret = secret;
      o.admission = timeout;
      w->hosted_ = value_of(HostedOrchestrator::start(o));
      c.orchestrator_address = host_port(host, w->hosted_->port());
      c.secret = secret;
      store->set(kSecretKey, bytes_of(secret));
      store->set(kOrchestratorKey, bytes_of(c.orchestrator_address));
    } else {
      c.orchestrator_address = text_of(store->get(kOrchestratorKey));  // waits, up to the store's timeout
      c.secret = text_of(store->get(kSecretKey));
    }
    const std::string orch_host = host_of(c.orchestrator_address);
    c.node_address = setting_text(SettingId::node_address)
                         .value_or(is_loopback_host(orch_host) ? std::string("127.0.0.1") : address_toward(orch_host, false));
    if (c.node_address.empty())
      throw Error(Status(Errc::invalid_config, "rank " + std::to_string(rank) +
                                                   " cannot tell its address toward the orchestrator at " +
                                                   c.orchestrator_address + "; set CHORUS_NODE_ADDRESS"));
  }
  return enter(std::move(w), c, own_group);
}

std::shared_ptr<World> World::join_newcomer(std::chrono::milliseconds timeout) {
  JoinTurn turn("this process is in a chorus collective already: a newcomer joins from none");
  Config c = launcher_config();
  if (!c.newcomer)
    throw Error(Status(Errc::invalid_config, "chorus.join() is for a newcomer to a running elastic job: start it with "
                                             "chorus-run --join (CHORUS_JOIN=1), or use init_process_group(\"chorus\")"));
  c.timeout = timeout;
  c.join_timeout = timeout;
  std::shared_ptr<World> w(new World);
  w->timeout_ = timeout;
  return enter(std::move(w), c);
}

std::shared_ptr<World> World::enter(std::shared_ptr<World> w, const Config& c, bool own_group) {
  w->runtime_ = std::make_unique<Runtime>();
  auto peer = w->runtime_->register_peer(0, c);
  if (!peer) {
    w->shutdown();
    throw Error(peer.status());
  }
  w->peer_ = *peer;
  std::lock_guard<std::mutex> reg(registry_mu);
  if (own_group) {
    std::erase_if(own_groups, [](const std::weak_ptr<World>& g) { return g.expired(); });
    own_groups.push_back(w);
  } else {
    the_world = w;
  }
  return w;
}

std::shared_ptr<World> World::current() {
  std::lock_guard<std::mutex> reg(registry_mu);
  auto w = the_world.lock();
  if (!w || w->is_down())
    throw Error(Status(Errc::invalid_config, "no chorus collective is up in this process for this chorus subgroup "
                                             "(its default group was destroyed, or is not chorus's)"));
  return w;
}

void World::shutdown_all() {
  std::vector<std::shared_ptr<World>> up;
  {
    std::lock_guard<std::mutex> reg(registry_mu);
    for (auto& g : own_groups)
      if (auto w = g.lock()) up.push_back(std::move(w));
    own_groups.clear();
    if (auto w = the_world.lock()) up.push_back(std::move(w));
  }
  for (auto& w : up) w->shutdown();  // groups of their own first, the World last
}

World::~World() { shutdown(); }

Peer World::group(const std::vector<int64_t>& ranks) {
  check_up();
  std::vector<PeerId> members;
  for (int64_t r : ranks) members.push_back(static_cast<PeerId>(r));
  return value_of(peer().new_group(std::move(members)));
}

bool World::is_down() const {
  std::lock_guard<std::mutex> lk(mu_);
  return down_;
}

void World::check_up() const {
  if (is_down()) throw Error(Status(Errc::finished, "chorus has shut down in this process (destroy_process_group or exit)"));
}

void World::shutdown() {
  std::unique_ptr<Runtime> runtime;
  std::unique_ptr<HostedOrchestrator> hosted;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (down_) return;
    down_ = true;
    runtime.swap(runtime_);
    hosted.swap(hosted_);
  }
  // The teardown blocks (up to the linger): Python's other threads go on meanwhile.
  std::optional<pybind11::gil_scoped_release> unlocked;
  if (Py_IsInitialized() && PyGILState_Check()) unlocked.emplace();
  runtime.reset();  // this node leaves
  if (hosted) {
    (void)hosted->wait_until_left(std::min(timeout_, kLingerCap));
    hosted.reset();
  }
}

} // namespace chorus::python
