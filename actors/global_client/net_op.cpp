#include "actors/global_client/net_op.hpp"

#include <cstring>
#include <thread>

#include "actors/global_client/global_client.hpp"

namespace chorus {

namespace {
// A receive at most this large polls the sockets before it sleeps (small ops, whose time a wake-up
// dominates); a larger one sleeps at once, leaving the cores to the copies that bring its bytes
// (forced-network 64 MiB all-reduce on 2 cores: 45 ms, 50-55 ms when it polled).
constexpr std::size_t kSpinBytes = std::size_t{256} << 10;
// How long a failed transfer waits for its connection to say why it failed.
constexpr auto kVerdictWait = std::chrono::milliseconds(200);

// The writer, or the reader in the middle of a frame, may see a connection fail before the
// connection's reader has said what it was (a broken link, the other process gone), which is what
// every peer must agree on: a moment's wait for that verdict, else `fallback`, which names only
// the connection. Called without any lock.
Status verdict(GlobalClient& client, Status fallback) {
  const auto until = Clock::now() + kVerdictWait;
  for (;;) {
    if (auto l = client.lost(); !l.is_ok()) return l;
    if (Clock::now() >= until) return fallback;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}
}

NetOp::NetOp(std::shared_ptr<GlobalClient> client, uint32_t group, uint64_t seq, uint32_t num_nodes,
             const std::optional<Status>& lost, const std::vector<std::pair<uint32_t, Status>>& left)
    : client_(std::move(client)), group_(group), seq_(seq), my_node_(client_->node_id()), ann_(num_nodes),
      gone_(num_nodes, false), ann_frame_(num_nodes), sent_(std::size_t{num_nodes} * num_nodes, false),
      stragglers_(num_nodes) {
  // What the node already knows, as node_lost() and node_left() would record it (nobody can wait
  // on the op yet, and it has nothing to send).
  if (lost) {
    lost_ = abort_ = *lost;
    ann_word_.set(kWordTop);
  }
  for (const auto& [node, why] : left)
    if (node < gone_.size()) {
      gone_[node] = true;
      left_status_ = why;
    }
}

void NetOp::wake_if_stopped_locked() {
  if (!abort_) return;
  for (auto& [slot, rec] : in_) rec->word.set(kWordTop);
}

bool NetOp::is_remote(int peer) const { return rank_node_[static_cast<std::size_t>(peer)] != my_node_; }

std::shared_ptr<NetOp::Incoming>& NetOp::incoming_locked(uint32_t slot) {
  auto& rec = in_[slot];
  if (!rec) {
    rec = std::make_shared<Incoming>();
    if (abort_) rec->word.set(kWordTop);  // an aborted op wakes whoever waits on it at once
  }
  return rec;
}

std::shared_ptr<NetOp::Incoming> NetOp::incoming(uint32_t slot) {
  std::lock_guard<std::mutex> lk(mu_);
  return incoming_locked(slot);
}

std::byte* NetOp::incoming_frame(uint32_t node, const FrameHeader& h) {
  std::shared_ptr<Incoming> rec;
  std::shared_ptr<std::byte> buf;  // back to the pool at return, unused, if an offer came meanwhile
  for (;;) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      rec = incoming_locked(h.slot);
      if (rec->started.load()) return nullptr;  // a duplicate slot: a broken peer; drop it
      const bool offered = rec->offered && rec->offered_bytes == h.bytes;
      if (offered || buf) {
        if (offered) {
          rec->data = rec->offered;
        } else {
          rec->buf = std::move(buf);
          rec->data = rec->buf.get();
        }
        rec->bytes = h.bytes;
        rec->node = node;
        rec->started.store(true, std::memory_order_release);
        break;
      }
    }
    // Nobody offered their memory: a pool buffer, taken without the lock (it may be allocated).
    buf = client_->pool().take(h.bytes ? h.bytes : 1);
  }
  // No wake-up yet: a waiter wants bytes, and progress() announces them.
  return rec->data;
}

bool NetOp::offer_destination(uint32_t slot, int p, std::byte* dst, std::size_t bytes) {
  std::lock_guard<std::mutex> lk(mu_);
  auto& r = incoming_locked(slot);
  if (r->started.load()) return false;
  r->offered = dst;
  r->offered_bytes = bytes;
  r->owner = p;
  return true;
}

void NetOp::incoming_progress(uint32_t slot, std::size_t got) {
  std::shared_ptr<Incoming> rec;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = in_.find(slot);
    if (it == in_.end()) return;
    rec = it->second;
  }
  rec->got.store(got, std::memory_order_release);
  uint32_t v = rec->word.value.load();
  if (v != kWordTop) rec->word.set(v + 1);
}

void NetOp::incoming_failed(uint32_t slot) {
  std::shared_ptr<Incoming> rec;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = in_.find(slot);
    if (it == in_.end()) return;
    rec = it->second;
  }
  rec->failed.store(true);
  rec->word.set(kWordTop);
}

void NetOp::release_offered(int p) {
  std::vector<std::shared_ptr<Incoming>> busy;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& [slot, rec] : in_) {
      if (!rec->offered || rec->owner != p) continue;
      if (!rec->started.load()) rec->offered = nullptr;  // a late frame goes to a pool buffer instead
      else if (rec->data == rec->offered && rec->got.load() < rec->bytes && !rec->failed.load()) busy.push_back(rec);
    }
  }
  for (auto& rec : busy) {
    auto done = [&] { return rec->got.load() >= rec->bytes || rec->failed.load(); };
    auto lost = [&] {
      std::lock_guard<std::mutex> lk(mu_);
      return lost_.has_value();
    };
    while (!done() && Clock::now() < link_deadline() && !lost()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (done()) continue;
    // The sender stalled mid-transfer: cut the connection so that pumping it lets go of the memory.
    client_->cut_off(rec->node, "node " + std::to_string(rec->node) + " stalled in the middle of a transfer");
    const auto grace = Clock::now() + std::chrono::seconds(5);
    while (!done() && Clock::now() < grace) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void NetOp::post_send(uint32_t slot, int peer, const std::byte* data, std::size_t bytes) {
  const uint32_t node = rank_node_[static_cast<std::size_t>(peer)];
  FrameHeader h = client_->frame_header(FrameType::data);
  h.group = group_;
  h.seq = seq_;
  h.slot = slot;
  h.bytes = bytes;
  auto ticket = SendTicket::of(h, data);
  Connection* conn = client_->connection(node);
  {
    // The frame that carries our announcement must go before any other data frame of this op to
    // that node: the ticket takes its place in the connection's line under the lock.
    std::lock_guard<std::mutex> lk(mu_);
    to_tell_[node] = false;
    ticket->preamble = bundle_for_locked(node);
    conn->queue(ticket);
    out_[slot] = Outgoing{ticket, node};
  }
  conn->push();
}

std::vector<std::optional<OpAnnouncement>> NetOp::announcements() const {
  std::lock_guard<std::mutex> lk(mu_);
  return ann_;
}

Status NetOp::wait_sent(uint32_t slot) {
  flush();
  Outgoing o;
  {
    std::lock_guard<std::mutex> lk(mu_);
    o = out_.at(slot);
  }
  // Waited for as a receive is (await): a send that takes long (its receiver busy or frozen)
  // spreads what we know to every node, so none takes this node for one that has not called.
  // Past the op's bound, the send still has until the link's deadline (link_deadline: a short
  // bound ends the op, not a frame half written), then await_sent cuts the receiver off as frozen.
  // A send already out (most small ones, written by the calling thread) skips the wait altogether.
  const bool ended = o.ticket->done.value.load() != 0 || await(o.ticket->done, 1, false);
  if ((ended || client_->await_sent(*o.ticket, o.node, link_deadline())) && o.ticket->done.value.load() == 1)
    return Status::ok();
  return verdict(*client_, {Errc::node_lost, label_ + ": the connection to node " + std::to_string(o.node) + " failed"});
}

const std::byte* NetOp::wait_received(uint32_t slot, int peer, std::size_t bytes, std::size_t upto, Status& error) {
  flush();
  auto rec = incoming(slot);
  const uint32_t node = rank_node_[static_cast<std::size_t>(peer)];
  rec->awaited_from.store(node, std::memory_order_relaxed);
  client_->before_data_wait(group_, seq_);
  for (;;) {
    const uint32_t g = rec->word.value.load();
    bool broke = false;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (abort_) {
        error = *abort_;
        return nullptr;
      }
      broke = rec->failed.load();
    }
    if (broke) {
      error = verdict(*client_, {Errc::node_lost, label_ + ": the connection to node " + std::to_string(node) +
                                                      " broke mid-transfer"});
      return nullptr;
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      const bool complete = rec->started.load() && rec->got.load() >= rec->bytes;
      if (gone_[node] && !complete) {
        error = *left_status_;
        return nullptr;
      }
      if (rec->started.load(std::memory_order_acquire)) {
        // The node's announcement precedes its data on the connection, so it is here.
        const auto& theirs = ann_[node];
        if (!theirs) {
          error = Status(Errc::internal, label_ + ": data from node " + std::to_string(node) + " before its announcement");
          return nullptr;
        }
        if (auto s = compare_announcements(*ann_[my_node_], *theirs, seq_); !s.is_ok()) {
          error = s;
          return nullptr;
        }
        if (rec->bytes != bytes) {
          error = Status(Errc::internal, label_ + ": node " + std::to_string(node) + " sent " + std::to_string(rec->bytes) +
                                             " bytes where the schedule expects " + std::to_string(bytes));
          return nullptr;
        }
      }
    }
    if (rec->started.load(std::memory_order_acquire) && rec->got.load(std::memory_order_acquire) >= upto)
      return rec->data;
    if (!await(rec->word, g + 1, bytes <= kSpinBytes)) {
      std::lock_guard<std::mutex> lk(mu_);
      error = Status(Errc::timeout, label_ + ": " +
                                        (ann_[node] ? "node " + std::to_string(node) + " sent too little"
                                                    : silent_names_locked({node}) + " never called") +
                                        " within the op's timeout (peer " + std::to_string(peer) + ")");
      return nullptr;
    }
  }
}

void NetOp::done_with(uint32_t slot) {
  std::shared_ptr<Incoming> rec;  // its buffer goes back to the pool (or is freed) after unlocking
  std::lock_guard<std::mutex> lk(mu_);
  if (auto it = in_.find(slot); it != in_.end()) {
    rec = std::move(it->second);
    in_.erase(it);
  }
}

Status NetOp::conclude(int p, Status local) {
  // Out of time (this peer's wait, or a node-mate's it waited for): a stalled link is named before
  // the verdict, which then reports it rather than the timeout it caused.
  if (Clock::now() >= deadline_.load()) client_->check_stalled_links();
  flush();
  release_offered(p);
  // The caller's memory may be released once we return: every queued send must be off it.
  std::vector<Outgoing> outs;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& [slot, o] : out_) outs.push_back(o);
  }
  for (auto& o : outs) client_->await_sent(*o.ticket, o.node, link_deadline());
  // Every node's announcement decides the error, so every peer everywhere reports the same one.
  const uint32_t nodes = static_cast<uint32_t>(ann_.size());
  for (;;) {
    const uint32_t g = ann_word_.value.load();
    bool waiting = false;
    {
      std::lock_guard<std::mutex> lk(mu_);
      for (uint32_t k = 0; k < nodes; ++k) waiting = waiting || (takes_part_[k] && !ann_[k] && !gone_[k]);
      // A node that never launched it decides the verdict already: no announcement can change it.
      waiting = waiting && !lost_ && !absent_status_;
    }
    if (!waiting || !await(ann_word_, g + 1)) break;
  }
  Status result;
  bool last = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    std::vector<uint32_t> missing;
    for (uint32_t k = 0; k < nodes; ++k)
      if (takes_part_[k] && !ann_[k]) missing.push_back(k);
    if (missing.empty()) result = judge_announcements(ann_, takes_part_, seq_);
    // The first of: the announcements' verdict, a lost node, a node that left, a node that never
    // called, this peer's own error.
    // The loss in the words every other way to it uses ("all_reduce #3: node 2 lost ...").
    if (result.is_ok() && lost_)
      result = label_.empty() || lost_->message().rfind(label_ + ": ", 0) == 0
                   ? *lost_
                   : Status(lost_->code(), label_ + ": " + lost_->message());
    if (result.is_ok() && !missing.empty() && left_status_) result = *left_status_;
    if (result.is_ok() && !missing.empty() && absent_status_) result = *absent_status_;
    if (result.is_ok() && !missing.empty())
      result = Status(Errc::timeout, label_ + ": " + silent_names_locked(missing) + " never called within the op's timeout");
    if (result.is_ok()) result = std::move(local);
    // Another node timed out on it: where it succeeded here (late), it fails with that node's error.
    // Any failure of its own stands (a lost link, say, the true cause of that timeout).
    if (given_up_ && result.is_ok()) result = *given_up_;
    concluded_ok_ = concluded_ok_ || result.is_ok();
    last = ++concluded_ == local_peers_;
  }
  // Whatever failed (a deadline passed, a node gone) after this node stood still long enough to be
  // dropped: it was this node.
  if (auto still = result.is_ok() ? std::nullopt : client_->stood_still())
    result = Status(Errc::node_lost, label_ + ": " + *still);
  if (result.code() == Errc::timeout) tell_given_up(result);
  if (!result.is_ok()) client_->note_failure(group_, seq_, result);
  if (last) client_->finished(group_, seq_);
  return result;
}

} // namespace chorus
