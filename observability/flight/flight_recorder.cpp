#include "observability/flight/flight_recorder.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include <chorus/config.hpp>
#include "observability/flight/flight_clock.hpp"
#include "observability/flight/flight_file.hpp"
#include "observability/flight/flight_spare.hpp"
#include "core/env.hpp"
#include "core/log.hpp"
#include "core/settings.hpp"

namespace chorus {

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Slots keep flight_clock readings in the row's *_ns fields; these make them UNIX time.
void to_unix(FlightRow& r, const flight_clock::ToUnix& conv) {
  r.enter_ns = conv(static_cast<uint64_t>(r.enter_ns));
  r.matched_ns = conv(static_cast<uint64_t>(r.matched_ns));
  r.exit_ns = conv(static_cast<uint64_t>(r.exit_ns));
}

std::string default_dir() {
  return env_text("TMPDIR").value_or("/tmp");
}

} // namespace

FlightRecorder::FlightRecorder(uint32_t peers, uint32_t entries, std::string dir) : entries_(entries) {
  static std::atomic<uint32_t> count{0};
  for (uint32_t i = 0; i < peers; ++i) {
    auto r = std::make_unique<Ring>();
    r->slots.resize(entries_);
    rings_.push_back(std::move(r));
  }
  if (dir.empty()) dir = default_dir();
  path_ = dir + "/chorus-flight-" + std::to_string(::getpid()) + "-" + std::to_string(++count) + ".txt";
  spare_ = std::make_unique<FlightSpare>(dir);
}

FlightRecorder::~FlightRecorder() = default;

Result<std::shared_ptr<FlightRecorder>> FlightRecorder::for_config(const Config& config) {
  uint32_t entries = config.flight_recorder;  // validated with the config
  static_assert(Config::kMaxFlightRecorder == 1048576, "CHORUS_FLIGHT_RECORDER's range (core/settings_table.cpp)");
  auto from_env = setting_number(SettingId::flight_recorder);
  if (!from_env) return from_env.status();
  if (*from_env) entries = static_cast<uint32_t>(**from_env);
  if (entries == 0) return std::shared_ptr<FlightRecorder>();
  const std::string dir = setting_text(SettingId::flight_dir).value_or(config.flight_dir);
  const auto signal_env = setting_text(SettingId::flight_signal);
  const bool signal = signal_env ? *signal_env != "0" : config.flight_signal;
  auto r = std::make_shared<FlightRecorder>(config.num_devices, entries, std::move(dir));
  if (config.num_nodes == 0) r->set_world(config.num_devices);  // one process: its peers are the job
  if (signal) watch_for_dump_signal(r);
  return r;
}

FlightRecorder::Slot* FlightRecorder::slot(Ring& r, uint64_t ticket) {
  if (ticket == 0) return nullptr;
  Slot& s = r.slots[(ticket - 1) % entries_];
  return s.row.ticket == ticket ? &s : nullptr;
}

OpDesc FlightOp::described() const {
  OpDesc d = op;
  if (data && data->defined()) {
    d.dtype = data->dtype();
    d.count = data->numel();
    d.on_device = data->is_cuda();
  }
  return d;
}

uint64_t FlightRecorder::begin(uint32_t local_peer, const FlightOp& op) {
  if (local_peer >= rings_.size()) return 0;
  const auto t = static_cast<int64_t>(flight_clock::now());
  Ring& r = *rings_[local_peer];
  std::lock_guard<std::mutex> lk(r.mu);
  const uint64_t ticket = r.next++;
  Slot& s = r.slots[(ticket - 1) % entries_];
  FlightRow& w = s.row;
  w.ticket = ticket;
  w.peer = op.peer;
  w.rank = op.rank;
  w.op = op.described();
  w.other = op.other;
  w.tag = op.tag;
  w.has_data = op.data && op.data->defined();
  if (w.has_data) {
    w.shape.assign(op.data->shape().begin(), op.data->shape().end());  // reuses the slot's buffer
    w.bytes = op.data->nbytes();
  } else {
    w.shape.clear();
    w.bytes = 0;
  }
  s.strategy = RunStrategy{};
  w.state = FlightState::waiting;
  w.enter_ns = t;
  w.matched_ns = w.exit_ns = 0;
  w.error.clear();
  return ticket;
}

void FlightRecorder::matched(uint32_t local_peer, uint64_t ticket, const RunStrategy& strategy) {
  if (local_peer >= rings_.size()) return;
  const auto t = static_cast<int64_t>(flight_clock::now());
  Ring& r = *rings_[local_peer];
  std::lock_guard<std::mutex> lk(r.mu);
  if (Slot* s = slot(r, ticket); s && s->row.state == FlightState::waiting) {
    s->row.state = FlightState::running;
    s->row.matched_ns = t;
    s->strategy = strategy;
  }
}

void FlightRecorder::end(uint32_t local_peer, uint64_t ticket, const Status& status) {
  if (local_peer >= rings_.size()) return;
  const auto t = static_cast<int64_t>(flight_clock::now());
  FlightRow failed;
  {
    Ring& r = *rings_[local_peer];
    std::lock_guard<std::mutex> lk(r.mu);
    Slot* s = slot(r, ticket);
    if (!s) return;
    s->row.exit_ns = t;
    s->row.state = status ? FlightState::done : FlightState::failed;
    if (status) return;
    s->row.error = status.to_string();
    failed = s->row;
  }
  to_unix(failed, flight_clock::ToUnix());
  dump_on_failure(failed);  // after unlocking: the dump takes every ring's lock
}

void FlightRecorder::dump_on_failure(const FlightRow& row) const {
  {
    std::lock_guard<std::mutex> lk(dump_mu_);
    const std::pair<uint32_t, uint64_t> op{row.op.group, row.op.seq};
    if (row.collective() && op == last_failure_op_) return;  // the op's other peers fail alike
    if (row.exit_ns - last_failure_dump_ns_ < std::chrono::nanoseconds(kDumpEvery).count()) return;
    last_failure_dump_ns_ = row.exit_ns;
    last_failure_op_ = op;
  }
  const std::string reason = row.describe() + (row.collective() ? " #" + std::to_string(row.op.seq) : "") +
                             " failed at rank " + std::to_string(row.peer) + ": " + row.error;
  LogWhere where{node(), static_cast<int64_t>(row.peer), static_cast<int64_t>(row.op.group),
                 row.collective() ? static_cast<int64_t>(row.op.seq) : -1};
  // On disk before the op's error returns (a launcher may end the process right after), and
  // outside every lock: the rows are taken first. Into the file made ahead, when there is one.
  auto written = write_flight_file(path_, snapshot(reason), spare_->take());
  if (written)
    CHORUS_LOG(warn, op, where, "flight recorder written to " + *written);
  else
    CHORUS_LOG(warn, op, where, "flight recorder not written: " + written.status().message());
}

std::vector<FlightRow> FlightRecorder::rows() const {
  std::vector<FlightRow> out;
  const flight_clock::ToUnix conv;
  for (const auto& r : rings_) {
    std::lock_guard<std::mutex> lk(r->mu);
    for (const Slot& s : r->slots) {
      if (s.row.ticket == 0) continue;
      out.push_back(s.row);
      out.back().strategy = to_string(s.strategy);
      to_unix(out.back(), conv);
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const FlightRow& a, const FlightRow& b) { return a.enter_ns < b.enter_ns; });
  return out;
}

std::vector<std::optional<FlightRow>> FlightRecorder::newest() const {
  std::vector<std::optional<FlightRow>> out(rings_.size());
  const flight_clock::ToUnix conv;
  for (std::size_t p = 0; p < rings_.size(); ++p) {
    const Ring& r = *rings_[p];
    std::lock_guard<std::mutex> lk(r.mu);
    if (r.next == 1) continue;
    const Slot& s = r.slots[(r.next - 2) % entries_];
    out[p] = s.row;
    out[p]->strategy = to_string(s.strategy);
    to_unix(*out[p], conv);
  }
  return out;
}

FlightDump FlightRecorder::snapshot(std::string_view reason) const {
  FlightDump d;
  d.pid = ::getpid();
  d.node = node();
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0) d.host = host;
  d.reason = std::string(reason);
  d.written_ns = now_ns();
  d.world = world_.load(std::memory_order_relaxed);
  d.rows = rows();
  return d;
}

Result<std::string> FlightRecorder::dump(std::string_view reason) const { return write_flight_file(path_, snapshot(reason)); }

} // namespace chorus
