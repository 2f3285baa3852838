// The trace of a Runtime's peers (CHORUS_TRACE=FILE, Config::trace_file): every local peer keeps
// its spans in memory (peer_trace.hpp: no lock, no file while ops run, at most
// kProcessTraceRecords records per process), and the Runtime writes them to one file per process
// in Chrome's Trace Event Format when it shuts down (trace_json.hpp; the name: trace_name.hpp).
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <chorus/result.hpp>
#include "observability/trace/peer_trace.hpp"

namespace chorus {

struct Config;

class Trace {
 public:
  // `pattern`: the file name (checked: core/trace_name.hpp); `peers`: the local peers.
  Trace(std::string pattern, uint32_t peers, bool multi_node, TraceBudget& budget = process_trace_budget());

  // The trace a registration asks for: CHORUS_TRACE (wins) or Config::trace_file; null when
  // neither names a file, an invalid_config error when CHORUS_TRACE's pattern is wrong.
  static Result<std::shared_ptr<Trace>> for_config(const Config& config);

  // Local peer `local_peer`'s part (null when out of range); fixed for the trace's life.
  PeerTrace* peer(uint32_t local_peer) const {
    return local_peer < peers_.size() ? peers_[local_peer].get() : nullptr;
  }
  // Multi-node: the node's id and the global rank of its first peer, once it joined.
  void set_node(int64_t node, uint32_t first_rank);
  // The file as things stand (the node's id may still come).
  std::string path() const;
  // Writes the file, the first time (what ops published by then); later calls return the first
  // outcome. Says where at info (init), a failure or dropped records at warn.
  Result<std::string> write();

 private:
  std::string pattern_;
  bool multi_node_;
  int64_t origin_unix_s_;  // UTC midnight before the trace began
  std::vector<std::unique_ptr<PeerTrace>> peers_;
  std::atomic<int64_t> node_{-1};
  std::atomic<uint32_t> first_rank_{0};
  std::mutex write_mu_;  // one write; guards written_
  std::optional<Result<std::string>> written_;
};

} // namespace chorus
