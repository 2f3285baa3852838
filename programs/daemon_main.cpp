// chorus-orchestrator: publishes the orchestrator actor (actors/orchestrator/orchestrator.hpp) and serves one
// collective after another until SIGINT or SIGTERM.
//
// Its options are read the way CAF applications read theirs: an actor_system_config with an
// opt_group, so --help is generated, a config file (--config-file=F, else caf-application.ini in
// the working directory if there is one) sets any option, the command line overrides the file,
// and CAF's own options (--long-help, --dump-config, --scheduler.*, --middleman.*) work too.
// CAF 0.17.6 reads no environment variable; the shared secret alone may come from CHORUS_SECRET,
// which keeps it off the command line (where ps shows it).
//
// The public port is a front door (actors/orchestrator/published.hpp): CAF listens on loopback
// only, behind it.
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>
#include <signal.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "actors/orchestrator/orchestrator.hpp"
#include "actors/orchestrator/published.hpp"
#include "core/secret.hpp"

namespace {

const char* about =
    "Admits the nodes of one multi-node collective at a time, checks that they agree (protocol\n"
    "version, shared secret, configuration), assigns node ids (a node's launcher rank, else\n"
    "arrival order) and hands every node the topology once --nodes nodes are in. Runs until\n"
    "SIGINT or SIGTERM. A node is a process whose chorus::Runtime registers its peers with a\n"
    "chorus::Config that sets num_nodes, orchestrator_address (this daemon's HOST:PORT),\n"
    "node_address and secret, or that Config::from_env() made with CHORUS_ORCHESTRATOR set\n"
    "(<chorus/chorus.hpp>); it watches the daemon's heartbeats itself, with no setting.\n"
    "Options take --name=value or --name value; a config file holds name=value lines (strings in\n"
    "quotes: host=\"0.0.0.0\"). The secret, when neither sets it, comes from CHORUS_SECRET.\n";

struct DaemonConfig : caf::actor_system_config {
  uint16_t port = 0;
  uint32_t nodes = 0;
  std::string host = "127.0.0.1";
  std::string secret;
  uint64_t timeout_ms = 30000;
  uint64_t heartbeat_ms = 1000;
  uint64_t handshake_ms = 2000;
  uint32_t max_payload_bytes = chorus::kDefaultMaxControlPayload;
  std::string tls_cert, tls_key, tls_ca;

  DaemonConfig() {
    opt_group{custom_options_, "global"}
        .add(port, "port", "TCP port to listen on, required (0: a free one, which is printed)")
        .add(nodes, "nodes", "nodes per collective, required (1 to 65536)")
        .add(host, "host", "address to listen on (default 127.0.0.1; 0.0.0.0 for every interface)")
        .add(secret, "secret", "shared secret every node must present (default: CHORUS_SECRET or none)")
        .add(timeout_ms, "timeout-ms", "admission limit of one collective, from its first node (default 30000)")
        .add(heartbeat_ms, "heartbeat-ms",
             "BASP heartbeat interval (default 1000; 0: off): a node silent for 4 intervals is lost")
        .add(handshake_ms, "handshake-ms",
             "how long a new connection may take to prove it knows the secret (default 2000)")
        .add(max_payload_bytes, "max-payload-bytes",
             "the largest BASP payload a node may send (default 1048576); a larger claim closes its connection")
        .add(tls_cert, "tls-cert", "TLS: this daemon's certificate (PEM); with --tls-key and --tls-ca")
        .add(tls_key, "tls-key", "TLS: its private key (PEM)")
        .add(tls_ca, "tls-ca", "TLS: the CA of the nodes' certificates (every connection is then TLS)");
  }

  // CAF 0.17 reads a long option only as --name=value, while this daemon has always been started
  // with --name value (by the tests, chorus-bench and users' scripts): an option CAF knows that
  // takes a value is joined with the argument after it.
  std::vector<std::string> joined(int argc, char** argv) const {
    std::vector<std::string> out;
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      if (a.size() > 2 && a.compare(0, 2, "--") == 0 && a.find('=') == std::string::npos && i + 1 < argc) {
        const auto* opt = custom_options_.cli_long_name_lookup(caf::string_view(a).substr(2));
        if (opt != nullptr && !opt->is_flag()) a += "=" + std::string(argv[++i]);
      }
      out.push_back(std::move(a));
    }
    return out;
  }

  // CAF 0.17 silently drops a value of the wrong type in the config file (nodes=-1, an unquoted
  // string), and keeps an unknown key without a word: read the file again as plain settings and
  // check what it says about this daemon's options. Returns "" or the complaint.
  std::string check_config_file() const {
    if (!std::ifstream(config_file_path)) return "";  // no file: nothing to check
    auto raw = parse_config_file(config_file_path.c_str());
    if (!raw) return "cannot read " + config_file_path + ": " + caf::to_string(raw.error());
    for (const auto& [key, value] : *raw) {
      if (caf::holds_alternative<caf::settings>(value)) continue;  // [middleman] and other CAF groups
      const auto* opt = custom_options_.qualified_name_lookup("global", key);
      if (opt == nullptr) return config_file_path + ": unknown option " + key;
      if (opt->check(value))
        return config_file_path + ": bad value for " + key + ": " + caf::to_string(value) + " (expected " +
               std::string(opt->type_name().begin(), opt->type_name().end()) + ")";
    }
    return "";
  }

  bool has(const char* key) const { return content.count(caf::string_view{key, std::strlen(key)}) != 0; }
};

// "bad argument --nodes=abc (unexpected character)" rather than CAF's
// parser_error(unexpected_character, ({"argument" = "--nodes=abc"})).
std::string describe(const caf::error& err, const std::string& config_file) {
  if (err.category() == caf::atom("parser")) {
    std::string what = caf::to_string(static_cast<caf::pec>(err.code()));
    for (auto& c : what)
      if (c == '_') c = ' ';
    const auto& ctx = err.context();
    if (!ctx.match_elements<caf::settings>()) return what;
    const auto& where = ctx.get_as<caf::settings>(0);
    if (auto arg = caf::get_if<std::string>(&where, "argument")) {
      if (static_cast<caf::pec>(err.code()) == caf::pec::not_an_option) return "unknown option " + *arg;
      return "bad argument " + *arg + " (" + what + ")";
    }
    if (auto line = caf::get_if<int64_t>(&where, "line"))  // a syntax error in the file
      return config_file + ", line " + std::to_string(*line) + ": " + what;
    return what;
  }
  if (err.category() == caf::atom("system") && static_cast<caf::sec>(err.code()) == caf::sec::cannot_open_file)
    return "cannot open the config file " + config_file;
  return caf::to_string(err);
}

int fail(const std::string& what) {
  std::cerr << "chorus-orchestrator: " << what << "\n(see chorus-orchestrator --help)\n";
  return 2;
}

// Whether the options make sense together; "" or the complaint.
std::string validate(const DaemonConfig& c, const chorus::TlsFiles& tls) {
  if (!c.remainder.empty()) return "unexpected argument " + c.remainder.front();
  if (!c.has("port")) return "--port is required";
  if (!c.has("nodes")) return "--nodes is required";
  if (c.nodes == 0 || c.nodes > 65536) return "bad --nodes " + std::to_string(c.nodes) + " (1 to 65536)";
  if (c.timeout_ms == 0) return "bad --timeout-ms 0 (at least 1)";
  if (c.heartbeat_ms > 3600000) return "bad --heartbeat-ms " + std::to_string(c.heartbeat_ms) + " (at most 3600000)";
  if (c.handshake_ms == 0 || c.handshake_ms > 600000)
    return "bad --handshake-ms " + std::to_string(c.handshake_ms) + " (1 to 600000)";
  if (tls.enabled() && (tls.certificate.empty() || tls.key.empty() || tls.ca.empty()))
    return "TLS needs --tls-cert, --tls-key and --tls-ca together";
  for (const auto* f : {&tls.certificate, &tls.key, &tls.ca})
    if (!f->empty() && access(f->c_str(), R_OK) != 0) return "cannot read " + *f;
  return "";
}

} // namespace

int main(int argc, char** argv) {
  DaemonConfig cfg;
  if (auto err = cfg.parse(cfg.joined(argc, argv))) return fail(describe(err, cfg.config_file_path));
  if (cfg.cli_helptext_printed) {  // --help, --long-help or --dump-config
    if (caf::get_or(cfg.content, "help", false) || caf::get_or(cfg.content, "long-help", false))
      std::cout << about;
    return 0;
  }
  if (auto bad = cfg.check_config_file(); !bad.empty()) return fail(bad);
  const chorus::TlsFiles tls{cfg.tls_cert, cfg.tls_key, cfg.tls_ca};
  if (auto bad = validate(cfg, tls); !bad.empty()) return fail(bad);
  if (!cfg.has("secret")) cfg.secret = chorus::secret_from_env();

  // A closed stdout or a peer's vanished socket must not kill the daemon.
  signal(SIGPIPE, SIG_IGN);
  // Block the stop signals in every thread (CAF's included); this thread waits for them below.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  // Every node's connection costs the door three descriptors (transport/front_door.hpp): take
  // what the system allows rather than a shell's default soft limit.
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }

  chorus::configure_remoting(cfg, std::chrono::milliseconds(cfg.heartbeat_ms), tls, {}, chorus::LinkEnd::accepting);
  caf::actor_system sys{cfg};
  chorus::OrchestratorCore::Options opts;
  opts.expected_nodes = cfg.nodes;
  opts.timeout = std::chrono::milliseconds(cfg.timeout_ms);
  auto orch = sys.spawn(chorus::orchestrator, opts);
  auto published = chorus::PublishedOrchestrator::publish(
      sys, orch, {cfg.host, cfg.port, cfg.secret, std::chrono::milliseconds(cfg.handshake_ms), cfg.max_payload_bytes});
  if (!published) {
    std::cerr << "chorus-orchestrator: " << published.status().message() << "\n";  // names the address
    caf::anon_send_exit(orch, caf::exit_reason::user_shutdown);
    return 1;
  }
  const uint16_t port = (*published)->port();
  if (cfg.secret.empty() && !tls.enabled())
    std::cerr << "chorus-orchestrator: no secret and no TLS: anyone who can reach port " << port
              << " can join or disturb the collective" << std::endl;
  std::cout << "chorus-orchestrator listening on " << cfg.host << ":" << port << " for " << cfg.nodes
            << " nodes" << (tls.enabled() ? " (TLS)" : "") << std::endl;

  int sig = 0;
  sigwait(&stop, &sig);
  std::cout << "chorus-orchestrator: signal " << sig << ", shutting down" << std::endl;
  published->reset();  // the door first: nothing new comes in while the actor stops
  caf::anon_send_exit(orch, caf::exit_reason::user_shutdown);
  return 0;
}
