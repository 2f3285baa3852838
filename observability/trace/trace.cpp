#include "observability/trace/trace.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>

#include <chorus/config.hpp>
#include "observability/trace/trace_json.hpp"
#include "core/log.hpp"
#include "core/settings.hpp"
#include "core/trace_name.hpp"

namespace chorus {

namespace {
constexpr int64_t kDaySeconds = 86400;
}

Trace::Trace(std::string pattern, uint32_t peers, bool multi_node, TraceBudget& budget)
    : pattern_(std::move(pattern)), multi_node_(multi_node) {
  const int64_t now_s =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  origin_unix_s_ = now_s - now_s % kDaySeconds;
  for (uint32_t i = 0; i < peers; ++i) peers_.push_back(std::make_unique<PeerTrace>(budget));
}

Result<std::shared_ptr<Trace>> Trace::for_config(const Config& config) {
  std::string pattern = config.trace_file;  // validated with the config
  if (auto e = setting_text(SettingId::trace)) {
    if (auto why = trace_pattern_problem(*e); !why.empty()) return Status(Errc::invalid_config, "CHORUS_TRACE " + why);
    pattern = *e;
  }
  if (pattern.empty()) return std::shared_ptr<Trace>();
  return std::make_shared<Trace>(std::move(pattern), config.num_devices, config.num_nodes > 0);
}

void Trace::set_node(int64_t node, uint32_t first_rank) {
  first_rank_.store(first_rank);
  node_.store(node);
}

std::string Trace::path() const { return trace_file_name(pattern_, ::getpid(), node_.load(), multi_node_); }

Result<std::string> Trace::write() {
  std::lock_guard<std::mutex> lk(write_mu_);
  if (written_) return *written_;
  const std::string file = path();
  TraceProcess p{::getpid(), node_.load(), multi_node_, first_rank_.load(), origin_unix_s_};
  std::ofstream out(file, std::ios::trunc);
  if (out) write_trace_json(out, p, peers_);
  out.close();
  uint64_t dropped = 0;
  for (const auto& t : peers_) dropped += t->dropped();
  const LogWhere where{node_.load(), -1, -1, -1};
  if (!out) {
    written_ = Result<std::string>(Status(Errc::invalid_config, "cannot write the trace to " + file + " (CHORUS_TRACE, trace_file)"));
    CHORUS_LOG(warn, init, where, written_->status().message());
    return *written_;
  }
  if (dropped > 0)
    CHORUS_LOG(warn, init, where,
               "the trace in " + file + " lacks " + std::to_string(dropped) + " ops and steps: past " +
                   std::to_string(kProcessTraceRecords) + " a process keeps no more");
  CHORUS_LOG(info, init, where, "wrote the trace to " + file);
  written_ = Result<std::string>(file);
  return *written_;
}

} // namespace chorus
