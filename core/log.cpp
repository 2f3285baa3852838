#include "core/log.hpp"

#include "core/settings.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>

namespace chorus {

namespace {

constexpr uint32_t kAllSubsys = 0xffffffffu;

struct State {
  std::atomic<uint8_t> level{0};
  std::atomic<uint32_t> subsys{kAllSubsys};
  std::mutex mu;  // one line at a time, and the sink
  std::function<void(const std::string&)> sink;
};

State& state() {
  static State* s = [] {
    auto* st = new State;  // never destroyed: threads may log during static destruction
    LogLevel l = LogLevel::none;
    if (auto e = setting_text(SettingId::debug); e && parse_log_level(*e, l)) st->level = static_cast<uint8_t>(l);
    uint32_t m = kAllSubsys;
    if (auto e = setting_text(SettingId::debug_subsys); e && parse_log_subsys(*e, m)) st->subsys = m;
    return st;
  }();
  return *s;
}

const char* name_of(LogLevel l) {
  switch (l) {
    case LogLevel::error: return "ERROR";
    case LogLevel::warn: return "WARN";
    case LogLevel::info: return "INFO";
    case LogLevel::trace: return "TRACE";
    case LogLevel::none: break;
  }
  return "";
}

const char* name_of(Subsys s) {
  switch (s) {
    case Subsys::init: return "init";
    case Subsys::op: return "op";
    case Subsys::net: return "net";
    case Subsys::shm: return "shm";
    case Subsys::orch: return "orch";
    case Subsys::cuda: return "cuda";
  }
  return "?";
}

} // namespace

bool log_on(LogLevel level, Subsys subsys) {
  State& s = state();
  return static_cast<uint8_t>(level) <= s.level.load(std::memory_order_relaxed) &&
         (s.subsys.load(std::memory_order_relaxed) & static_cast<uint32_t>(subsys)) != 0;
}

void log_line(LogLevel level, Subsys subsys, const LogWhere& where, std::string_view message) {
  const auto now = std::chrono::system_clock::now();
  const std::time_t secs = std::chrono::system_clock::to_time_t(now);
  const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() % 1000000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char head[96];
  std::snprintf(head, sizeof head, "chorus %04d-%02d-%02dT%02d:%02d:%02d.%06lldZ %s %s", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<long long>(micros), name_of(level),
                name_of(subsys));
  std::string line = head;
  auto field = [&](const char* name, int64_t v) {
    if (v >= 0) line += std::string(" ") + name + " " + std::to_string(v);
  };
  field("node", where.node);
  field("rank", where.rank);
  field("group", where.group);
  field("op", where.op);
  line += ": ";
  line += message;
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  if (s.sink) return s.sink(line);
  std::fprintf(stderr, "%s\n", line.c_str());
}

bool parse_log_level(std::string_view text, LogLevel& level) {
  if (text.empty() || text == "none") level = LogLevel::none;
  else if (text == "error") level = LogLevel::error;
  else if (text == "warn") level = LogLevel::warn;
  else if (text == "info") level = LogLevel::info;
  else if (text == "trace") level = LogLevel::trace;
  else return false;
  return true;
}

bool parse_log_subsys(std::string_view text, uint32_t& mask) {
  if (text.empty() || text == "all") {
    mask = kAllSubsys;
    return true;
  }
  uint32_t m = 0;
  while (!text.empty()) {
    const auto comma = text.find(',');
    const std::string_view name = text.substr(0, comma);
    bool known = false;
    for (Subsys s : {Subsys::init, Subsys::op, Subsys::net, Subsys::shm, Subsys::orch, Subsys::cuda})
      if (name == name_of(s)) {
        m |= static_cast<uint32_t>(s);
        known = true;
      }
    if (!known) return false;
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
  }
  mask = m;
  return true;
}

std::string configure_log(std::string_view level, std::string_view subsys) {
  LogLevel l = LogLevel::none;
  if (!parse_log_level(level, l))
    return "debug level '" + std::string(level) + "' (expected error, warn, info, trace or none)";
  uint32_t m = kAllSubsys;
  if (!parse_log_subsys(subsys, m))
    return "debug subsystems '" + std::string(subsys) + "' (expected a list of init, op, net, shm, orch, cuda, or all)";
  State& s = state();
  if (!setting_text(SettingId::debug) && !level.empty()) s.level = static_cast<uint8_t>(l);
  if (!setting_text(SettingId::debug_subsys) && !subsys.empty()) s.subsys = m;
  return {};
}

void set_log_sink(std::function<void(const std::string&)> sink) {
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  s.sink = std::move(sink);
}

} // namespace chorus
