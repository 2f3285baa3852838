#include "actors/orchestrator/published.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <caf/io/basp_broker.hpp>

#include <atomic>

#include "actors/orchestrator/basp_server.hpp"
#include "transport/front_door.hpp"

namespace chorus {

namespace {
// The key BASP files a handed-over connection's actor under: its map of published actors is
// keyed by port, and no port of CAF's is open in an actor system whose connections are handed
// over; distinct per PublishedOrchestrator of the process all the same.
uint16_t next_key() {
  static std::atomic<uint16_t> key{0};
  uint16_t k = ++key;
  return k != 0 ? k : ++key;
}
} // namespace

PublishedOrchestrator::PublishedOrchestrator(caf::actor_system& sys, orchestrator_actor orch)
    : sys_(sys), orch_(std::move(orch)) {}

Result<std::unique_ptr<PublishedOrchestrator>> PublishedOrchestrator::publish(caf::actor_system& sys,
                                                                              const orchestrator_actor& orch,
                                                                              const Options& opts) {
  std::unique_ptr<PublishedOrchestrator> p(new PublishedOrchestrator(sys, orch));
  FrontDoor::Options d;
  d.host = opts.host;
  d.port = opts.port;
  d.secret = opts.secret;
  d.handshake_timeout = opts.handshake_timeout;
  // The door ends the link's TLS: with certificates where the system has TLS files, else keyed
  // by the secret. CAF speaks plain BASP behind it, through a socket pair.
  auto certified = tls_context(sys);
  if (!certified) return certified.status();
  d.certified = std::move(*certified);
  d.seal = !d.certified;
  p->basp_ = sys.middleman().named_broker<caf::io::basp_broker>(caf::atom("BASP"));
  p->key_ = next_key();  // set before the door's thread starts: it reads it
  PublishedOrchestrator* self = p.get();  // the door, which calls it, closes before p goes
  d.open_inner = [self] { return self->hand_over(); };
  d.make_guard = [server = basp_server(sys, orch.id()), max = opts.max_payload] {
    return std::make_unique<BaspGuard>(server, max);
  };
  auto door = FrontDoor::open(std::move(d));
  if (!door) return door.status();  // p's destructor unpublishes
  p->door_ = std::move(*door);
  p->port_ = p->door_->port();
  return p;
}

int PublishedOrchestrator::hand_over() {
  int ends[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends) != 0) return -1;
  // BASP's own way to serve a connection it did not accept (CAF keeps it for tests): the broker
  // writes its server handshake for the actor published under the key and reads the client from
  // then on.
  caf::io::scribe_ptr scribe = sys_.middleman().backend().new_scribe(ends[0]);
  caf::anon_send(basp_, caf::publish_atom::value, std::move(scribe), key_,
                 caf::actor_cast<caf::strong_actor_ptr>(orch_), sys_.message_types(orch_));
  return ends[1];
}

PublishedOrchestrator::~PublishedOrchestrator() {
  door_.reset();
  if (basp_) caf::anon_send(basp_, caf::unpublish_atom::value, caf::actor_cast<caf::actor_addr>(orch_), key_);
}

} // namespace chorus
