#include "launch/run_options.hpp"

#include <charconv>

#include <chorus/config.hpp>

namespace chorus::launch {

namespace {

Status usage_error(std::string what) { return Status(Errc::invalid_argument, std::move(what)); }

// A whole number in [min, max], or the error naming the option.
Result<uint64_t> number(const std::string& option, const std::string& text, uint64_t min, uint64_t max) {
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  const std::string range = std::to_string(min) + " to " + std::to_string(max);
  if (text.empty() || ec == std::errc::invalid_argument || end != text.data() + text.size())
    return usage_error("bad " + option + " '" + text + "' (a whole number, " + range + ")");
  if (ec == std::errc::result_out_of_range || v < min || v > max)
    return usage_error("bad " + option + " " + text + " (" + range + ")");
  return v;
}

} // namespace

Result<RunOptions> parse_run_options(const std::vector<std::string>& args) {
  RunOptions o;
  bool have_n = false;
  std::string hosts_text;
  bool have_hosts = false;
  std::size_t i = 0;
  for (; i < args.size(); ++i) {
    std::string opt = args[i];
    if (opt == "--") {
      ++i;
      break;
    }
    if (opt.size() < 2 || opt[0] != '-') break;  // the program
    // The option's value: after '=' in the same word, -nN's digits, or the next word.
    std::optional<std::string> inline_value;
    if (opt.compare(0, 2, "--") == 0) {
      if (const auto eq = opt.find('='); eq != std::string::npos) {
        inline_value = opt.substr(eq + 1);
        opt.resize(eq);
      }
    } else if (opt.compare(0, 2, "-n") == 0 && opt.size() > 2) {
      inline_value = opt.substr(2);
      opt = "-n";
    }
    auto value = [&]() -> Result<std::string> {
      if (inline_value) return *inline_value;
      if (i + 1 >= args.size()) return usage_error(opt + " needs a value");
      return args[++i];
    };
    if (opt == "--help" || opt == "-h") {
      o.help = true;
      return o;
    }
    if (opt == "--tag-output" || opt == "--elastic") {
      if (inline_value) return usage_error(opt + " takes no value");
      (opt == "--elastic" ? o.elastic : o.tag_output) = true;
      continue;
    }
    auto v = value();
    if (!v) return v.status();
    if (opt == "-n") {
      auto n = number("-n", *v, 1, kMaxProcesses);
      if (!n) return n.status();
      o.processes = static_cast<uint32_t>(*n);
      have_n = true;
    } else if (opt == "--peers") {
      auto p = number("--peers", *v, 1, Config::kMaxDevices);
      if (!p) return p.status();
      o.peers = static_cast<uint32_t>(*p);
    } else if (opt == "--hosts") {
      hosts_text = *v;
      have_hosts = true;
    } else if (opt == "--secret-file") {
      if (v->empty()) return usage_error("--secret-file needs a file name");
      o.secret_file = *v;
    } else if (opt == "--join-timeout-ms") {
      auto t = number("--join-timeout-ms", *v, 1, kMaxJoinTimeoutMs);
      if (!t) return t.status();
      o.join_timeout_ms = *t;
    } else if (opt == "--join" || opt == "--join-file") {
      if (v->empty()) return usage_error(opt + " needs a file name");
      (opt == "--join" ? o.join : o.join_file) = *v;
    } else if (opt == "--orchestrator-address") {
      if (v->empty()) return usage_error("--orchestrator-address needs a host name or address");
      o.orchestrator_address = *v;
    } else {
      return usage_error("unknown option " + opt);
    }
  }
  if (!have_n) return usage_error("-n is required (the number of processes)");
  if (!o.join.empty() && (o.elastic || !o.join_file.empty() || !o.secret_file.empty() || !o.orchestrator_address.empty()))
    return usage_error("--join starts newcomers with the job's own orchestrator and secret: it takes none of --elastic, "
                       "--join-file, --secret-file, --orchestrator-address");
  if (!o.join_file.empty() && !o.elastic) return usage_error("--join-file is for --elastic jobs");
  if (i >= args.size()) return usage_error("no program to run");
  o.program = args[i];
  o.args.assign(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
  if (have_hosts) {
    auto hosts = parse_hosts(hosts_text);
    if (!hosts) return hosts.status();
    o.hosts = std::move(*hosts);
    // The same count place_ranks makes, here so that a bad command line starts nothing.
    uint64_t slots = 0;
    for (const auto& h : o.hosts) slots += h.slots;
    if (slots < o.processes)
      return usage_error("--hosts has " + std::to_string(slots) + " slot" + (slots == 1 ? "" : "s") + " for " +
                         std::to_string(o.processes) + " processes");
  }
  return o;
}

std::string_view run_usage() {
  return R"(usage: chorus-run -n N [options] PROG [ARGS...]

Starts a chorus orchestrator inside this process and N processes of PROG, each told through its
environment who it is and where the orchestrator is (chorus::Config::from_env reads it), and
supervises them: when one fails, the others are ended, and chorus-run exits with its status.

Options (before PROG; `--` ends them):
  -n N                       the number of processes, 1 to 65536 (required)
  --peers P                  CHORUS_PEERS=P for every process: its peers (1 to 4096)
  --hosts H1:S1,H2:S2,...    put the first S1 ranks on H1, the next S2 on H2, ... (a host without
                             :S has 1 slot). localhost, 127.0.0.1 and this machine's name start
                             processes here; any other host through ssh (CHORUS_RUN_SSH, else ssh,
                             with -o BatchMode=yes), in the same working directory.
                             Without --hosts every process runs here.
  --orchestrator-address A   the name other hosts reach this machine by (default: its hostname
                             with remote hosts, else 127.0.0.1); given to an --elastic job, it
                             lets newcomers on other hosts join (--join --hosts)
  --secret-file F            the orchestrator's secret: the first line of F (default:
                             CHORUS_SECRET_FILE's, else CHORUS_SECRET, else 32 random bytes
                             in hex)
  --join-timeout-ms MS       CHORUS_JOIN_TIMEOUT_MS=MS for every process, and the orchestrator's
                             admission limit (default 60000)
  --tag-output               prefix every line a process prints with "[RANK] "
  --elastic                  an elastic job (docs/elastic.md): CHORUS_ELASTIC=1 for every process;
                             a process that fails or is killed ends only itself (the others shrink
                             and go on); newcomers may join (--join). Exit status: 0 when no
                             process failed by itself and one exited with 0
  --join-file F              with --elastic: where to write how newcomers join (default:
                             $XDG_RUNTIME_DIR/chorus/chorus-run-PID.join, else in /tmp/chorus-UID)
  --join F                   start N newcomers to the running elastic job whose --join-file is F
                             (CHORUS_JOIN=1): no orchestrator of its own. Run it where the job's
                             chorus-run runs; with --hosts the newcomers start there (the job
                             started with --hosts naming another host, or --orchestrator-address
                             with a name other hosts reach this machine by)
  -h, --help                 this text

Every process gets CHORUS_RANK, CHORUS_WORLD_SIZE, CHORUS_LOCAL_RANK, CHORUS_LOCAL_WORLD_SIZE,
CHORUS_ORCHESTRATOR (host:port), CHORUS_SECRET, CHORUS_NODE_ADDRESS, CHORUS_JOIN_TIMEOUT_MS, and
CHORUS_PEERS when given. The secret is never on a command line: a remote process reads it from
ssh's standard input.

Exit status (--elastic: see above): 0 when every process exits with 0; else the first failure's (its exit status, or
128+N for signal N); 2 for a bad command line or secret file; 127 when PROG cannot be run; 1 when
the orchestrator or a process cannot be started.
)";
}

} // namespace chorus::launch
