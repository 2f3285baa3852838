// Every CHORUS_* environment variable, in one table of documented parameters (NCCL's NCCL_PARAM is
// the model), and the one way each is read. docs/settings.md and the README's table are made from
// this table (chorus-ctl settings --markdown; settings_test checks them).
#pragma once
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <chorus/result.hpp>

namespace chorus {

// In the table's order.
enum class SettingId : uint8_t {
  debug, debug_subsys, flight_recorder, flight_dir, flight_signal, trace, spin_us, yield_us, socket_spin_us,
  data_port_from_any, arena_kib, arena_wait_ms, shm_ring_kib, p2p_eager_kib, p2p_eager_message_kib,
  p2p_local_eager_kib,
  rank, world_size, local_rank, local_world_size, peers, orchestrator, node_address, secret_file, timeout_ms,
  join_timeout_ms, seal_data, elastic, join,
  secret, run_ssh, bench_node_id_fd, extra_packages,
  fault_seed_base, fault_kind, teardown_exit, pythonpath, smoke_dtypes, run_test_out, run_test_err,
  count
};

// Who reads a variable: each is a table of docs/settings.md.
enum class SettingReader : uint8_t {
  library,   // every program that links chorus, once per process or at registration
  from_env,  // Config::from_env()
  programs,  // chorus's programs and scripts, not the library
  tests,     // the test suites and their scripts
};

enum class SettingKind : uint8_t {
  text,    // taken as it is; empty counts as unset
  number,  // a whole number from min to max
  flag,    // 0 or 1
};

struct Setting {
  SettingId id;
  const char* name;
  SettingReader reader;
  SettingKind kind;
  uint64_t fallback;  // numbers and flags: the value when unset
  uint64_t min, max;  // numbers and flags: what the variable takes
  const char* shown_default;  // the docs' default column
  const char* meaning;        // docs/settings.md (markdown)
  const char* brief;          // the README's line (markdown); empty: not in the README
  const char* read_in;        // the files that read it
};

std::span<const Setting> settings();
const Setting& setting(SettingId id);
const Setting* find_setting(std::string_view name);

// The variable's value; nullopt when it is unset or empty.
std::optional<std::string> setting_text(SettingId id);
// Strictly, for what is read where an error can be returned (registration, Config::from_env()):
// nullopt when unset or empty; an invalid_config error naming the variable, its value and the
// range when it is not a whole number from min to max.
Result<std::optional<uint64_t>> setting_number(SettingId id);
// For what is read once per process, where no caller can be told (the waits, the arena, the
// rings): the value, else the table's fallback when unset, empty, or not a whole number from min
// to max; the last case is logged once as a warning (subsystem init) naming the variable.
uint64_t tuned_number(SettingId id);
inline std::chrono::microseconds tuned_micros(SettingId id) { return std::chrono::microseconds(tuned_number(id)); }
// What the strict reader says of the variable's value now: empty when it is fine (or unset).
std::string setting_problem(SettingId id);

// Markdown tables made from the table: one reader's table for docs/settings.md, and the README's.
std::string settings_markdown(SettingReader reader);
std::string settings_readme_markdown();
// Every setting with its value in this environment, and what is wrong with it (chorus-ctl settings).
std::string settings_report();

} // namespace chorus
