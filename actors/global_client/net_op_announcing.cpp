// NetOp's announcements (net_op.hpp): launching the op with ours, taking in and forwarding the
// others', spreading everything we know when the op stops or takes long, and the node events that
// stop it. Every frame is queued under the op's lock and sent after it (Outbox).
#include "actors/global_client/net_op.hpp"

#include <algorithm>

#include "actors/global_client/global_client.hpp"
#include "core/log.hpp"
#include "messages/data_codec.hpp"  // encode_leaving
#include "messages/status_codec.hpp"  // rank_phrase

namespace chorus {

void NetOp::Outbox::queue(Connection* c, std::shared_ptr<SendTicket> t) {
  c->queue(std::move(t));
  if (std::find(conns.begin(), conns.end(), c) == conns.end()) conns.push_back(c);
}

void NetOp::Outbox::send() const {
  for (Connection* c : conns) c->push();
}

std::string NetOp::bundle_for_locked(uint32_t node) {
  std::string out;
  for (uint32_t o = 0; o < ann_frame_.size(); ++o)
    if (const std::size_t k = std::size_t{node} * ann_.size() + o; o != node && !ann_frame_[o].empty() && !sent_[k]) {
      out += ann_frame_[o];
      sent_[k] = true;
    }
  return out;
}

void NetOp::spread_locked(Outbox& out) {
  if (!launched_) return;  // we know nothing we must pass on yet; launch() spreads if need be
  for (uint32_t n = 0; n < ann_.size(); ++n) {
    if (n == my_node_ || !takes_part_[n]) continue;
    to_tell_[n] = false;
    if (std::string b = bundle_for_locked(n); !b.empty()) out.queue(client_->connection(n), SendTicket::frames(std::move(b)));
  }
}

void NetOp::launch(OpAnnouncement mine, Clock::time_point deadline, std::string label, uint32_t local_peers,
                   std::vector<uint32_t> rank_node, FrameHeader announce_header, std::string announce_body,
                   std::vector<uint32_t> tell) {
  Outbox out;
  std::unique_lock<std::mutex> lk(mu_);
  ann_frame_[my_node_] = whole_frame(announce_header, announce_body);
  to_tell_.assign(ann_.size(), false);
  for (uint32_t n : tell) to_tell_[n] = true;
  rank_node_ = std::move(rank_node);
  takes_part_.assign(ann_.size(), false);
  for (uint32_t n : rank_node_) takes_part_[n] = true;
  launched_ = true;
  const auto now = Clock::now();
  deadline_.store(deadline);
  data_deadline_ = std::max(deadline, now + client_->config().timeout);
  link_floor_.store(data_deadline_);
  spread_at_ = std::min(deadline, now + kSpreadAfter);
  half_at_.store(now + (deadline - now) / 2);
  label_ = std::move(label);
  local_peers_ = local_peers;
  ann_[my_node_] = std::move(mine);
  extend_if_all_called_locked();  // no wait of ours has begun yet
  for (uint32_t k = 0; k < ann_.size(); ++k)
    if (k != my_node_ && ann_[k]) stop_if_doomed_locked(*ann_[k], out);
  ann_word_.set(ann_word_.value.load() + 1);
  wake_if_stopped_locked();
  if (abort_) spread_locked(out);  // stopped before it started: nobody may wait for our forwards
  lk.unlock();
  out.send();
}

bool NetOp::extend_if_all_called_locked() {
  if (!launched_ || all_called_) return false;
  uint32_t bound_ms = 0;  // the shortest timeout any node's peers gave the op; 0: none
  for (uint32_t k = 0; k < ann_.size(); ++k) {
    if (!takes_part_[k]) continue;
    if (!ann_[k]) return false;
    if (const uint32_t t = ann_[k]->timeout_ms; t != 0 && (bound_ms == 0 || t < bound_ms)) bound_ms = t;
  }
  all_called_ = true;
  const Clock::time_point before = deadline_.load();
  if (bound_ms == 0) {
    if (data_deadline_ > before) deadline_.store(data_deadline_);
    return false;
  }
  // Counted from when every node called, as in one process from when every peer did: each node
  // learns it at about the same moment, so every node's transfers end by about the same time. It
  // only ever shortens what this node had (data_deadline_: the later of its own bound and its
  // Config's, from the launch, which its plan's own waits keep): no node waits past its own bound.
  const auto now = Clock::now();
  const auto bound = std::chrono::milliseconds(bound_ms);
  const Clock::time_point d = std::min(now + bound, std::max(before, data_deadline_));
  deadline_.store(d);
  if (now + bound / 2 < half_at_.load()) half_at_.store(now + bound / 2);
  return d < before;
}

void NetOp::wake_all_waits() {
  std::vector<std::shared_ptr<Incoming>> recs;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& [slot, rec] : in_) recs.push_back(rec);
  }
  wake_waits(recs);
}

void NetOp::stop_if_doomed_locked(const OpAnnouncement& theirs, Outbox& out) {
  if (abort_ || !launched_ || !ann_[my_node_]) return;
  // A node whose own peers failed sends no data, and one that disagrees with us sends data we
  // cannot use: stop waiting at once (conclude() then judges every announcement, so every peer
  // everywhere still reports the same error).
  if (!theirs.status.is_ok()) abort_ = Status(theirs.status.code(), label_ + ": node " + std::to_string(theirs.node) + " failed");
  else if (auto s = compare_announcements(*ann_[my_node_], theirs, seq_); !s.is_ok()) abort_ = s;
  if (abort_) spread_locked(out);
}

void NetOp::announced(const OpAnnouncement& a, const FrameHeader& h, const std::string& frame) {
  Outbox out;
  bool closer = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (a.node >= ann_.size() || ann_[a.node]) return;
    ann_[a.node] = a;
    ann_frame_[a.node] = whole_frame(h, frame);
    closer = extend_if_all_called_locked();
    if (launched_ && abort_) spread_locked(out);  // stopped: we no longer forward along the schedule
    stop_if_doomed_locked(a, out);
    wake_if_stopped_locked();
    uint32_t v = ann_word_.value.load();
    if (v != kWordTop) ann_word_.set(v + 1);
  }
  out.send();
  if (closer) wake_all_waits();  // each waits on to a later moment: it must see the new bound
}

bool NetOp::await(WaitWord& w, uint32_t target, bool spin) {
  Poller& poller = client_->poller();
  if (!spread_.load() && Clock::now() < spread_at_ && poller.wait(w, target, std::min(spread_at_, deadline_.load()), spin))
    return true;
  // Slow: maybe a node on the path of our forwards is stuck. Everything we know goes to every
  // node now, well before the deadline, so every node can still name the same culprit.
  if (!spread_.exchange(true)) {
    Outbox out;
    {
      std::lock_guard<std::mutex> lk(mu_);
      spread_locked(out);
    }
    out.send();
  }
  // Half the op's time gone: say once what it still waits for (the local phase says it for the
  // node's own peers, LocalServerCore::at_half_time).
  if (!warned_.load() && Clock::now() < half_at_.load() && poller.wait(w, target, half_at_.load(), spin)) return true;
  if (!warned_.load()) client_->note_unacked_links();  // once per op, give or take a racing peer
  if (!warned_.exchange(true) && log_on(LogLevel::warn, Subsys::op)) {
    const std::string what = waiting_for();
    if (!what.empty())
      CHORUS_LOG(warn, op, (LogWhere{my_node_, -1, group_, static_cast<int64_t>(seq_)}),
                 label_ + ": waiting for " + what + ", half the op's timeout gone");
  }
  // The deadline moves once every node announced: wait on to the new one (one that came closer
  // wakes the waits, which then look again).
  for (Clock::time_point d = deadline_.load();; ) {
    if (poller.wait(w, target, d, spin)) return true;
    const Clock::time_point now_d = deadline_.load();
    if (now_d == d) break;
    d = now_d;
  }
  client_->check_stalled_links();  // the op timeout is the detector of a stalled link
  return false;
}

namespace {
std::string node_phrase(const std::vector<uint32_t>& ns) {
  std::string s = ns.size() == 1 ? "node " : "nodes ";
  for (std::size_t i = 0; i < ns.size(); ++i) s += (i ? ", " : "") + std::to_string(ns[i]);
  return s;
}
} // namespace

std::string NetOp::silent_names_locked(const std::vector<uint32_t>& silent) const {
  std::vector<uint32_t> ranks, nodes;
  for (uint32_t n : silent) {
    if (stragglers_[n].empty()) nodes.push_back(n);
    ranks.insert(ranks.end(), stragglers_[n].begin(), stragglers_[n].end());
  }
  if (ranks.empty()) return node_phrase(nodes);
  return rank_phrase(ranks) + (nodes.empty() ? "" : " and " + node_phrase(nodes));
}

void NetOp::stragglers(uint32_t node, std::vector<uint32_t> ranks) {
  std::lock_guard<std::mutex> lk(mu_);
  if (node < stragglers_.size()) stragglers_[node] = std::move(ranks);
}

std::string NetOp::waiting_for() const {
  std::lock_guard<std::mutex> lk(mu_);
  if (!launched_ || abort_) return {};
  std::vector<uint32_t> silent, data;
  for (uint32_t n = 0; n < ann_.size(); ++n)
    if (takes_part_[n] && !ann_[n]) silent.push_back(n);
  if (!silent.empty()) return silent_names_locked(silent) + " (not called yet)";
  for (const auto& [slot, rec] : in_) {
    const int64_t from = rec->awaited_from.load(std::memory_order_relaxed);
    const bool complete = rec->started.load() && rec->got.load() >= rec->bytes;
    if (from >= 0 && !complete && std::find(data.begin(), data.end(), from) == data.end())
      data.push_back(static_cast<uint32_t>(from));
  }
  std::sort(data.begin(), data.end());
  if (!data.empty()) return "data from " + node_phrase(data);
  // Sends whose bytes have not all left: the receiver does not take them (busy, or frozen).
  std::vector<uint32_t> takers;
  for (const auto& [slot, o] : out_)
    if (o.ticket->done.value.load() == 0 && std::find(takers.begin(), takers.end(), o.node) == takers.end())
      takers.push_back(o.node);
  std::sort(takers.begin(), takers.end());
  return takers.empty() ? std::string() : node_phrase(takers) + " to take our data";
}

void NetOp::stop(const Status& why) {
  std::vector<std::shared_ptr<Incoming>> recs;
  Outbox out;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!abort_) {
      abort_ = why;
      spread_locked(out);
    }
    for (auto& [slot, rec] : in_) recs.push_back(rec);
  }
  out.send();
  for (auto& r : recs) r->word.set(kWordTop);
}

void NetOp::node_lost(const Status& why) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!lost_) lost_ = why;
  }
  stop(why);
  ann_word_.set(kWordTop);
}

void NetOp::gave_up(const Status& why, uint32_t node, bool never_launched) {
  // A node that timed out in the op's transfers: the op is not stopped, since what it waits for
  // may yet fail it with a truer cause (a link that stalled, which that node's timeout only
  // showed), and what came already may let it end. A node that never launched it sent nothing and
  // will send nothing: the op is stopped (below).
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!given_up_ && concluded_ == 0) given_up_ = why;
    if (!never_launched || node >= ann_.size() || ann_[node]) return;
    if (!absent_status_) absent_status_ = why;
  }
  // It cannot succeed without that node: every wait in it ends, those for other nodes' data too
  // (which would need that node's), and the wait for the announcements stops counting on it.
  stop(why);
  wake_waits({});
}

void NetOp::tell_given_up(const Status& why) {
  std::vector<uint32_t> nodes;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (told_given_up_ || given_up_ || concluded_ok_ || !launched_) return;  // a note we had is not passed on
    told_given_up_ = true;
    for (uint32_t n = 0; n < ann_.size(); ++n)
      if (n != my_node_ && takes_part_[n] && !gone_[n]) nodes.push_back(n);
  }
  client_->tell_nodes(FrameType::gave_up, group_, seq_, encode_leaving(why), nodes);
}

void NetOp::wake_waits(const std::vector<std::shared_ptr<Incoming>>& recs) {
  for (auto& r : recs) {
    uint32_t v = r->word.value.load();
    if (v != kWordTop) r->word.set(v + 1);
  }
  uint32_t v = ann_word_.value.load();
  if (v != kWordTop) ann_word_.set(v + 1);
}

void NetOp::node_left(uint32_t node, const Status& why) {
  std::vector<std::shared_ptr<Incoming>> recs;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (node >= gone_.size()) return;
    gone_[node] = true;
    left_status_ = why;
    for (auto& [slot, rec] : in_) recs.push_back(rec);
  }
  wake_waits(recs);
}

void NetOp::flush() {
  Outbox out;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (uint32_t n = 0; n < to_tell_.size(); ++n)
      if (to_tell_[n]) {
        to_tell_[n] = false;
        sent_[std::size_t{n} * ann_.size() + my_node_] = true;
        out.queue(client_->connection(n), SendTicket::frames(ann_frame_[my_node_]));
      }
  }
  out.send();
}

} // namespace chorus
