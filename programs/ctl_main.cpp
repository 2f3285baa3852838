// chorus-ctl: looks at a job from outside.
//   chorus-ctl status --orchestrator HOST:PORT [--secret-file F | --secret S]
//                     [--tls-certificate F --tls-key F --tls-ca F] [--timeout-ms N]
//                                       where every node's peers stand, grouped by op and wait
//                                       (the secret: --secret-file, --secret, else CHORUS_SECRET)
//   chorus-ctl flight [--all] FILE...   flight recorders side by side, and the first divergence
//   chorus-ctl settings [--markdown library|from_env|programs|tests|readme]
//                                       every CHORUS_* variable, its default and its value here
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "actors/ctl/status_query.hpp"
#include "observability/flight/flight_file.hpp"
#include "observability/flight/flight_report.hpp"
#include "core/secret.hpp"
#include "core/settings.hpp"

namespace {

int usage() {
  std::cerr << "usage: chorus-ctl status --orchestrator HOST:PORT [--secret-file F | --secret S]\n"
               "                         [--tls-certificate F --tls-key F --tls-ca F] [--timeout-ms N]\n"
               "         where every node's peers stand: the op each is in, for how long, and what it waits for\n"
               "         (the secret: the first line of F, else CHORUS_SECRET; --secret S shows it to ps)\n"
               "       chorus-ctl flight [--all] FILE...\n"
               "         flight recorders side by side (each process of a job writes its recorder on an op\n"
               "         error, a timeout, a node loss, or SIGUSR1; --all: every recorded op, not the last 20)\n"
               "       chorus-ctl settings [--markdown library|from_env|programs|tests|readme]\n"
               "         every CHORUS_* variable: its default, what it takes, its value in this environment, and\n"
               "         what is wrong with it (exit 1 when something is); --markdown: the docs' tables\n";
  return 2;
}

int status(const std::vector<std::string>& args) {
  std::string where, secret;
  bool secret_given = false;
  chorus::TlsFiles tls;
  long timeout_ms = 10000;
  for (std::size_t i = 0; i < args.size(); i += 2) {
    if (i + 1 >= args.size()) return usage();
    const std::string& k = args[i];
    const std::string& v = args[i + 1];
    if (k == "--orchestrator") where = v;
    else if (k == "--secret") secret = v, secret_given = true;
    else if (k == "--secret-file") {
      auto s = chorus::read_secret_file(v);
      if (!s) {
        std::cerr << "chorus-ctl: " << s.status().message() << "\n";
        return 1;
      }
      secret = *s, secret_given = true;
    } else if (k == "--tls-certificate") tls.certificate = v;
    else if (k == "--tls-key") tls.key = v;
    else if (k == "--tls-ca") tls.ca = v;
    else if (k == "--timeout-ms") timeout_ms = std::atol(v.c_str());
    else return usage();
  }
  // As the daemon: CHORUS_SECRET when no option names one.
  if (!secret_given) secret = chorus::secret_from_env();
  const auto colon = where.rfind(':');
  if (where.empty() || colon == std::string::npos || timeout_ms <= 0) return usage();
  const int port = std::atoi(where.c_str() + colon + 1);
  if (port <= 0 || port > 65535) return usage();
  auto j = chorus::query_job_status(where.substr(0, colon), static_cast<uint16_t>(port), secret, tls,
                                    std::chrono::milliseconds(timeout_ms));
  if (!j) {
    std::cerr << "chorus-ctl: " << j.status().to_string() << "\n";
    return 1;
  }
  std::cout << chorus::job_status_report(*j);
  return 0;
}

int flight(const std::vector<std::string>& args) {
  chorus::FlightReportOptions options;
  std::vector<chorus::FlightDump> dumps;
  for (const std::string& a : args) {
    if (a == "--all") {
      options.last_ops = 0;
      continue;
    }
    std::ifstream f(a);
    if (!f) {
      std::cerr << "chorus-ctl: cannot read " << a << "\n";
      return 1;
    }
    std::stringstream text;
    text << f.rdbuf();
    auto d = chorus::parse_flight_dump(text.str());
    if (!d) {
      std::cerr << "chorus-ctl: " << a << ": " << d.status().message() << "\n";
      return 1;
    }
    dumps.push_back(std::move(*d));
  }
  if (dumps.empty()) return usage();
  std::cout << chorus::flight_report(dumps, options);
  return 0;
}

// Every setting and its value here; or one of the tables docs/settings.md and the README are made of.
int settings(const std::vector<std::string>& args) {
  if (args.empty()) {
    std::cout << chorus::settings_report();
    for (const chorus::Setting& s : chorus::settings())
      if (s.reader != chorus::SettingReader::tests && !chorus::setting_problem(s.id).empty()) return 1;
    return 0;
  }
  if (args.size() != 2 || args[0] != "--markdown") return usage();
  const std::string& which = args[1];
  if (which == "readme") std::cout << chorus::settings_readme_markdown();
  else if (which == "library") std::cout << chorus::settings_markdown(chorus::SettingReader::library);
  else if (which == "from_env") std::cout << chorus::settings_markdown(chorus::SettingReader::from_env);
  else if (which == "programs") std::cout << chorus::settings_markdown(chorus::SettingReader::programs);
  else if (which == "tests") std::cout << chorus::settings_markdown(chorus::SettingReader::tests);
  else return usage();
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string cmd = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (cmd == "flight") return flight(args);
  if (cmd == "status") return status(args);
  if (cmd == "settings") return settings(args);
  return usage();
}
