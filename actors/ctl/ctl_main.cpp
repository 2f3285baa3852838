// chorus-ctl: looks at a job from outside.
//   chorus-ctl flight [--all] FILE...   flight recorders side by side, and the first divergence
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "actors/flight/flight_file.hpp"
#include "actors/flight/flight_report.hpp"

namespace {

int usage() {
  std::cerr << "usage: chorus-ctl flight [--all] FILE...   print flight recorders side by side\n"
               "  (each process of a job writes its recorder on an op error, a timeout, a node loss, or SIGUSR1;\n"
               "   --all prints every recorded op, not the last 20 of each group)\n";
  return 2;
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

} // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string cmd = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (cmd == "flight") return flight(args);
  return usage();
}
