// The arena: small collectives among the peers of one memory domain (the threads of a process, or
// the processes of one host through a shared segment) run in one region that every peer maps.
// Each peer posts its call, and its input, in a slot of its own; once every peer has posted, each
// reads what it needs straight from the others' slots (strategies/arena_ops.hpp). No lock, no
// message and no system call on the way: a post is a copy and a store, a wait a spin on the
// others' words (a futex sleep only after the spin, and a wake only for a sleeper).
//
// Agreement. An op runs in the arena only if every peer posted the same call (kind, dtype, reduce
// op, root, shape) and each found its own call fit (host tensors, sizes right, small enough).
// Anything else, and any peer still missing when the others' patience ends, sends the op down the
// ordinary path (the local server), which words every error and serves every long wait. That is
// one decision per op, settled by the first peer to take it (a compare-and-swap on the op's
// verdict word), so every peer of an op takes the same path, whoever comes late.
//
// Reuse. A peer's slot is double-buffered by sequence number: it posts op s+2 where it posted op
// s, which it reaches only after op s+1, and every peer entered op s+1 after it finished op s.
// Only a peer frozen past an op's timeout can fall behind that; so a reader checks after reading
// that each slot it read still holds op s, and fails its op rather than return a torn result.
#pragma once
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <chorus/status.hpp>
#include <chorus/types.hpp>

#include "core/wait.hpp"

namespace chorus {

// A peer's call as every peer of the op compares it.
struct ArenaCall {
  OpKind kind = OpKind::barrier;
  DType dtype = DType::f32;
  ReduceOp redop = ReduceOp::sum;
  bool fits = false;      // this peer's own call is valid and small enough for the arena
  uint32_t root = 0;
  uint64_t count = 0;     // per-peer element count, in the sense of strategies/schedule.hpp
  uint32_t ndim = 0;      // the shape every peer must pass alike (longer ones do not fit)
  int64_t dims[4] = {};
  uint32_t place = 0;     // where the tensors lie: 0 host memory, else a GPU (a digest of its UUID)
  bool operator==(const ArenaCall&) const = default;
};

class Arena {
 public:
  static constexpr uint64_t kMagic = 0x43484f5241524e31;  // "CHORARN1"
  static constexpr uint32_t kVerdicts = 16;               // verdict words, reused by sequence number

  // The bytes a region for `peers` peers with slots of `slot_bytes` (per buffer) needs.
  static std::size_t region_bytes(uint32_t peers, std::size_t slot_bytes);
  // Lays a new arena out in `region` (region_bytes long, 64-byte aligned). `tag` names the job
  // (across processes: what an attaching process checks). Not yet open: see open().
  static Arena create(void* region, uint32_t peers, std::size_t slot_bytes, uint64_t tag);
  // An arena another process laid out in `region` (`bytes` long): checked against `tag` and the
  // size before anything else of it is read; an invalid Arena (valid() false) and `why` otherwise.
  static Arena attach(void* region, std::size_t bytes, uint64_t tag, std::string& why);
  Arena() = default;
  bool valid() const { return ctl_ != nullptr; }

  uint32_t peers() const;
  std::size_t slot_bytes() const;
  // Open: every process that was to map it has (said in the log; a process that mapped it uses it
  // from then on, since one that could not never posts, and the others' waits end at their
  // patience or at the close that follows). Closed: no peer posts any more, and every wait in it
  // ends at once (a node lost, a runtime shut down, a process that could not map it).
  void open();
  void close();
  bool usable() const;  // not closed

  enum class Verdict : uint8_t { go, slow };
  // Posts `rank`'s call for op `seq` (its input, `bytes` of it, copied into its slot when the call
  // fits) and waits until every peer has posted, the arena closes or `give_up` passes: the op's
  // verdict, the same for every peer. Waiting spins and yields as `patience` says, then sleeps.
  Verdict meet(uint32_t rank, uint64_t seq, const ArenaCall& call, const void* input, std::size_t bytes,
               Clock::time_point give_up, Patience patience);
  // After a go: where peer r's input for op `seq` lies, and whether it still holds op `seq`
  // (check after reading it).
  const std::byte* input_of(uint32_t r, uint64_t seq) const;
  bool still_holds(uint32_t r, uint64_t seq) const;
  // The peers that have not posted op `seq` yet: whom a status report names while it waits here.
  std::vector<uint32_t> not_posted(uint64_t seq) const;

  // Ops one peer runs for all (GPU tensors, runtime/peer/gpu_arena_path.hpp): after a go the others
  // post nothing more and wait until that peer, the op's lead, says how the op ended. The lead's
  // slot for `seq` then carries the error's text (its post is read by nobody any more).
  void conclude(uint32_t lead, uint64_t seq, const Status& how);
  enum class Heard : uint8_t { concluded, closed, gave_up };
  // Waits (as meet does) for the lead's word on op `seq`: concluded (`how` set), the arena closed
  // (unless `past_close`: a lead still running may conclude after a close), or `give_up` passed.
  Heard await_conclusion(uint32_t lead, uint64_t seq, Clock::time_point give_up, Patience patience,
                         Status& how, bool past_close = false) const;

  struct Control;
  struct Post;

 private:
  Arena(Control* ctl, std::byte* base) : ctl_(ctl), base_(base) {}
  Post& post(uint32_t r, uint64_t seq) const;
  std::byte* slot(uint32_t r, uint64_t seq) const;
  // Every peer's post for `seq` is there: whether they agree and all fit; false while one lacks.
  bool all_posted(uint64_t seq, bool& agree) const;
  Verdict settle(uint64_t seq, Verdict v);  // the compare-and-swap; returns the op's verdict
  void ring() const;                        // wakes sleepers, if any
  // Starts the others' first `bytes` of input for op `seq` on their way into this core's cache.
  void prefetch_inputs(uint32_t rank, uint64_t seq, std::size_t bytes) const;
  // Spins, yields, then sleeps on the bell until look() is true (true) or `give_up` (false).
  template <class Look>
  bool wait(Look&& look, Clock::time_point give_up, Patience patience) const;

  Control* ctl_ = nullptr;
  std::byte* base_ = nullptr;
};

// An arena with what keeps its memory (heap, or a mapping shared by the processes of a host)
// alive, as peer handles hold it.
struct ArenaSeat {
  Arena arena;
  std::shared_ptr<void> memory;
  bool across_nodes = false;  // the node processes of a job on one host (Config::global applies)
};

} // namespace chorus
