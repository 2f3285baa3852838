// chorus's one logging facility, in the manner of NCCL_DEBUG / NCCL_DEBUG_SUBSYS: a level
// (CHORUS_DEBUG=error|warn|info|trace, default: nothing) and the subsystems to hear from
// (CHORUS_DEBUG_SUBSYS=init,op,net,shm,orch,cuda or all, default all), set from the environment or
// from Config (Config::debug, Config::debug_subsys; the environment wins). One line per event on
// stderr: time, level, subsystem, then node, rank, group and op where they are known. Silent by
// default: a job that works prints nothing.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace chorus {

enum class LogLevel : uint8_t { none = 0, error = 1, warn = 2, info = 3, trace = 4 };
enum class Subsys : uint32_t { init = 1, op = 2, net = 4, shm = 8, orch = 16, cuda = 32 };

// Where an event happened; -1 / 0: not known or not relevant.
struct LogWhere {
  int64_t node = -1;
  int64_t rank = -1;
  int64_t group = -1;
  int64_t op = -1;
};

// Whether an event of this level and subsystem is written (cheap: two relaxed loads).
bool log_on(LogLevel level, Subsys subsys);
// Writes one line (call through CHORUS_LOG, which checks log_on first).
void log_line(LogLevel level, Subsys subsys, const LogWhere& where, std::string_view message);

// "error", "warn", "info", "trace", "none" (or "": none); false when unknown.
bool parse_log_level(std::string_view text, LogLevel& level);
// A comma-separated list of subsystems, or "all"; false when a name is unknown.
bool parse_log_subsys(std::string_view text, uint32_t& mask);
// Sets what is written: from `level` / `subsys` texts (a Config's), unless the environment sets
// them. Returns a description of what is wrong with the texts, or "".
std::string configure_log(std::string_view level, std::string_view subsys);
// Tests: where lines go (default: stderr); an empty function restores stderr.
void set_log_sink(std::function<void(const std::string&)> sink);

} // namespace chorus

#define CHORUS_LOG(level, subsys, where, message)                                  \
  do {                                                                             \
    if (::chorus::log_on(::chorus::LogLevel::level, ::chorus::Subsys::subsys))     \
      ::chorus::log_line(::chorus::LogLevel::level, ::chorus::Subsys::subsys, (where), (message)); \
  } while (0)
