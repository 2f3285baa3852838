// chorus-orchestrator: publishes the orchestrator actor (actors/orchestrator/orchestrator.hpp) and serves one
// collective after another until SIGINT or SIGTERM.
#include <pthread.h>
#include <unistd.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "actors/orchestrator/orchestrator.hpp"

namespace {

const char* usage =
    "usage: chorus-orchestrator --port P --nodes N [--host H] [--secret S] [--timeout-ms T]\n"
    "                           [--heartbeat-ms H] [--tls-cert F --tls-key F --tls-ca F]\n"
    "\n"
    "Admits the nodes of one multi-node collective at a time, checks that they agree (protocol\n"
    "version, shared secret, configuration), assigns node ids in arrival order and hands every\n"
    "node the topology once N nodes are in. Runs until SIGINT or SIGTERM.\n"
    "\n"
    "  --port P        TCP port to listen on (0: pick a free one; the chosen port is printed)\n"
    "  --nodes N       nodes per collective (>= 1)\n"
    "  --host H        address to listen on (default 127.0.0.1; 0.0.0.0 for every interface)\n"
    "  --secret S      shared secret every node must present (default: none; prefer the\n"
    "                  CHORUS_SECRET environment variable, which is used when --secret is absent)\n"
    "  --timeout-ms T  how long admission of one collective may take once its first node\n"
    "                  registered (default 30000)\n"
    "  --heartbeat-ms H  BASP heartbeat interval; a node silent for 4 intervals is dropped and\n"
    "                  counts as lost (default 1000; 0 turns heartbeats off). Nodes should use\n"
    "                  configure_remoting(cfg, H) too, to notice a frozen orchestrator\n"
    "  --tls-cert F    TLS: this daemon's certificate (PEM); with --tls-key and --tls-ca every\n"
    "  --tls-key F     connection is TLS and mutually authenticated: nodes must present a\n"
    "  --tls-ca F      certificate signed by the CA in --tls-ca (set Config::tls_* on the nodes)\n"
    "  --help          this text\n";

bool parse_u64(const std::string& s, uint64_t& out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || s[0] == '-') return false;
  out = v;
  return true;
}

int fail(const std::string& what) {
  std::cerr << "chorus-orchestrator: " << what << "\n\n" << usage;
  return 2;
}

} // namespace

int main(int argc, char** argv) {
  std::string host = "127.0.0.1";
  uint64_t port = 0, nodes = 0, timeout_ms = 30000, heartbeat_ms = 1000;
  bool have_port = false, have_secret = false;
  std::string secret;
  chorus::TlsFiles tls;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::cout << usage;
      return 0;
    }
    if (i + 1 >= argc) return fail("missing value for " + a);
    std::string v = argv[++i];
    if (a == "--port") {
      if (!parse_u64(v, port) || port > 65535) return fail("bad --port " + v);
      have_port = true;
    } else if (a == "--nodes") {
      if (!parse_u64(v, nodes) || nodes == 0 || nodes > 65536) return fail("bad --nodes " + v);
    } else if (a == "--host") {
      host = v;
    } else if (a == "--secret") {
      secret = v;
      have_secret = true;
    } else if (a == "--tls-cert") {
      tls.certificate = v;
    } else if (a == "--tls-key") {
      tls.key = v;
    } else if (a == "--tls-ca") {
      tls.ca = v;
    } else if (a == "--heartbeat-ms") {
      if (!parse_u64(v, heartbeat_ms) || heartbeat_ms > 3600000) return fail("bad --heartbeat-ms " + v);
    } else if (a == "--timeout-ms") {
      if (!parse_u64(v, timeout_ms) || timeout_ms == 0) return fail("bad --timeout-ms " + v);
    } else {
      return fail("unknown flag " + a);
    }
  }
  if (!have_port) return fail("--port is required");
  if (nodes == 0) return fail("--nodes is required");
  if (tls.enabled() && (tls.certificate.empty() || tls.key.empty() || tls.ca.empty()))
    return fail("TLS needs --tls-cert, --tls-key and --tls-ca together");
  for (const auto* f : {&tls.certificate, &tls.key, &tls.ca})
    if (!f->empty() && access(f->c_str(), R_OK) != 0) return fail("cannot read " + *f);
  if (!have_secret)
    if (const char* env = std::getenv("CHORUS_SECRET")) secret = env;

  // A closed stdout or a peer's vanished socket must not kill the daemon.
  signal(SIGPIPE, SIG_IGN);
  // Block the stop signals in every thread (CAF's included); this thread waits for them below.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  caf::actor_system_config cfg;
  chorus::configure_remoting(cfg, std::chrono::milliseconds(heartbeat_ms), tls);
  caf::actor_system sys{cfg};
  chorus::OrchestratorCore::Options opts;
  opts.expected_nodes = static_cast<uint32_t>(nodes);
  opts.secret = secret;
  opts.timeout = std::chrono::milliseconds(timeout_ms);
  auto orch = sys.spawn(chorus::orchestrator, opts);
  auto bound = chorus::publish_remote(sys, orch, static_cast<uint16_t>(port), host);
  if (!bound) {
    std::cerr << "chorus-orchestrator: cannot listen on " << host << ":" << port << ": "
              << sys.render(bound.error()) << "\n";
    caf::anon_send_exit(orch, caf::exit_reason::user_shutdown);
    return 1;
  }
  std::cout << "chorus-orchestrator listening on " << host << ":" << *bound << " for " << nodes
            << " nodes" << (tls.enabled() ? " (TLS)" : "") << std::endl;

  int sig = 0;
  sigwait(&stop, &sig);
  std::cout << "chorus-orchestrator: signal " << sig << ", shutting down" << std::endl;
  (void)sys.middleman().unpublish(orch, *bound);
  caf::anon_send_exit(orch, caf::exit_reason::user_shutdown);
  return 0;
}
