// Point to point across nodes: the messages that other nodes' peers sent to ours and the answers to
// our own sends, matched FIFO per (group, source, destination, tag): as within a node, a receive
// takes only its own handle's messages. The frame routing delivers them;
// GlobalClient::send and recv (p2p_send_recv.cpp) take them, waiting through the poller.
//
// What one node may leave in another's mailbox is bounded (P2PWindow): a send whose data does not
// fit the data window sends its header alone, and its data when the receive that took the header
// pulls it (MPI's rendezvous); a send beyond the message window waits for room. The receiving
// node holds every sender to the same bounds and ends the link of one that overruns them.
//
// A message's data travels in a frame of its own (p2p_body), named by the sending node's number
// for the message, right after its header (eager: the frame routing keeps the header until its
// data is in, then delivers both) or when pulled: straight into the tensor of the receive that
// pulled it (body(), below). Eager data whose receive already waits for it lands straight in that
// receive's tensor too (land(), p2p_landing.cpp).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <compare>
#include <vector>

#include <chorus/status.hpp>
#include <chorus/types.hpp>
#include "core/wait.hpp"
#include "transport/poller.hpp"

namespace chorus {

// Bounds on what one node leaves in another's mailbox, untaken: data sent ahead of its receive,
// and messages (headers). Both ends of a link use the same (protocol constants).
struct P2PWindow {
  uint64_t bytes = uint64_t{64} << 20;
  uint32_t messages = 65536;
  // A message's header (a P2PHeader) is at most this long, so that messages without data hold
  // little: 65,536 of them at most 64 MiB. A sender's failure text is cut to fit.
  static constexpr std::size_t kHeaderBytes = 1024;
};

class P2PMailbox {
 public:
  // `eager`: how much of this node's data may go ahead of its receives to one node (CHORUS_P2P_EAGER_KIB),
  // within the window.
  explicit P2PMailbox(P2PWindow w = {}, uint64_t eager = UINT64_MAX) : window_(w), eager_(std::min(eager, w.bytes)) {}
  const P2PWindow& window() const { return window_; }

  struct Key {
    uint32_t group = 0;        // the handle's group (0: the world); ids are unique in the job
    uint32_t source = 0;       // global peer ids
    uint32_t destination = 0;
    uint64_t tag = 0;
    auto operator<=>(const Key&) const = default;
  };
  struct Message {
    uint64_t order = 0;  // when it arrived, among all messages (take_any takes the first)
    DType dtype;
    uint64_t numel;
    std::shared_ptr<std::byte> data;  // its data, `size` bytes; none where pulled
    uint64_t size = 0;
    Status failed;       // the sender could not send (then there is no data)
    uint64_t id = 0;     // the sender node's number for it, which the answer names
    uint32_t node = 0;   // the sender's node
    bool pulled = false; // its data waits at the sender until the receive pulls it (frame p2p_pull)
    uint64_t landed_in = 0;  // the ticket of the receive whose tensor holds its data (`data` points there)
    uint64_t data_bytes() const { return pulled ? 0 : size; }
  };
  // An answer to one of this node's sends: the message it answers (Message::id) and its status.
  struct Answer {
    uint64_t id = 0;
    Status status;
  };

  // Whether a message of `data_bytes` from `node` fits what that node may leave here: the frame
  // routing asks before it reads the frame, and ends the link where it does not (`why` says so).
  bool admit(uint32_t node, uint64_t data_bytes, std::string& why);
  void deliver(const Key& k, Message m);
  // The answer to our message `id` of k: kept for its send, which registered it (sent) and has not
  // returned; dropped (its room freed) where the send gave up on it; otherwise dropped.
  void answer(const Key& k, uint64_t id, Status s);
  // A send of message `id` of k, from before its header goes until it returns (returned).
  void sent(const Key& k, uint64_t id);
  void returned(const Key& k, uint64_t id);
  // Takes back message `id` for k if no receive took it yet (its send timed out): true if it was here.
  bool withdraw(const Key& k, uint64_t id);
  // The send of message `id` gives up on its answer: dropped when it comes (its room, reserve's
  // `bytes` and `eager`, kept until then); or returned, where it came just now.
  std::optional<Status> abandon(const Key& k, uint64_t id, uint32_t node, uint64_t bytes, bool eager);
  void node_lost(const Status& why);                 // every pair fails
  void node_left(uint32_t node, const Status& why);  // pairs with that node fail

  // A receive posted here at its call (MPI's order of posting; runtime/peer/posted_op.hpp), for
  // as long as it lives: a message that a receive posted before it may take is left to that one.
  // `k.source` may be kAnySource. Its ticket goes to the takes (0: none, in no line). `waits`
  // (if given; called under the mailbox's lock, so it only looks at a word) says whether it still
  // waits for a message here: a receive from any source that the local server paired at its call
  // holds nothing back once paired, though its line has not run it yet.
  class Posted {
   public:
    Posted(P2PMailbox& box, const Key& k, std::function<bool()> waits = {})
        : box_(box), ticket_(box.post(k, std::move(waits))) {}
    Posted(const Posted&) = delete;
    Posted& operator=(const Posted&) = delete;
    ~Posted() { box_.unpost(ticket_); }
    uint64_t ticket() const { return ticket_; }

   private:
    P2PMailbox& box_;
    uint64_t ticket_;
  };

  // A receive's host tensor, where an eager message's data may land straight away.
  struct Landing {
    std::byte* into = nullptr;
    DType dtype = DType::f32;
    uint64_t numel = 0;
    uint64_t bytes = 0;
  };

  // Waits for the first message (answer) for k from `node`: `it` (out is filled), `ended` (`why`
  // is the loss or goodbye that ended the wait) or `nothing` (the deadline passed). `ticket`: the
  // receive's Posted (0: none). `landing` (with a ticket): while it waits, the data of a message
  // for it that comes now may be written straight into that tensor (out.data then points there);
  // a wait that ends without a message must then settle_landing before the tensor goes back.
  enum class Took { it, ended, nothing, stopped };
  Took take_message(const Key& k, uint32_t node, Poller& poller, Clock::time_point deadline, Message& out,
                    Status& why, uint64_t ticket = 0, const Landing* landing = nullptr);
  // After a take_message with a landing that took nothing: no data lands there any more; a message
  // whose data landed meanwhile is taken after all (`it`); where data is still being written,
  // `writing` rises to 1 once its frame ended (then settle again) and `nothing` is returned.
  Took settle_landing(uint64_t ticket, Message& out, std::shared_ptr<WaitWord>& writing);
  // The frame routing, as an eager message's data (m's, its header just in) begins: the tensor it
  // may go straight into (m.landed_in and m.data set), where the receive that will take it is the
  // first posted for k, waits with a landing of m's type and length, and nothing of k is queued
  // ahead; nullptr otherwise (a buffer of its own). The message is then delivered as ever, or, its
  // frame failing, land_failed.
  std::byte* land(const Key& k, Message& m);
  void land_failed(const Message& m);
  // Receives that wait with a tensor offered, and the eager messages that landed so (tests order
  // their sends by the first; the second says it happened).
  std::size_t offered();
  uint64_t landings();
  // The answer to message `id` (answers to earlier messages of k, whose sends gave up, are dropped);
  // `stopped` once `stop` (if given) holds, checked after every wake.
  Took take_answer(const Key& k, uint64_t id, uint32_t node, Poller& poller, Clock::time_point deadline, Status& out,
                   Status& why, const std::function<bool()>* stop = nullptr);
  // A receive from any source: the first message of `group` delivered to `dst` with `tag` from one of
  // `from` (its key in `k`); or `stopped` once `stop()` holds (checked after every wake: whoever
  // makes it hold calls wake()). It ends when a node is lost, or once every node of `from_nodes`
  // (the senders' nodes) left in order.
  Took take_any(uint32_t group, uint32_t dst, uint64_t tag, const std::vector<uint32_t>& from, const std::vector<uint32_t>& from_nodes,
                Poller& poller, Clock::time_point deadline, const std::function<bool()>& stop, Key& k, Message& out, Status& why,
                uint64_t ticket = 0);
  // What take_any took is lent until the receive keeps it (keep: its answer goes to the sender)
  // or gives it back (put_back: first in its queue again, as it took another instead). A message
  // withdrawn while lent is dropped at put_back, which then returns true: the caller answers the
  // sender's withdrawal (GlobalClient::answer_withdrawn).
  void keep(const Key& k, uint64_t id);
  bool put_back(const Key& k, Message m);
  void wake() { bump(); }

  // ---- The sender's side of the windows
  // Room for one more message to `node`, waited for (`it`; `ended`, `nothing`). `eager`, in: the
  // planner lets its `bytes` of data go with it (plan_p2p_eager); out: they do (the window has room
  // for them), or they wait for the receive's pull. The send ends it with
  // unreserve (its answer came, or its node is gone); a send that gave up on its answer (abandon)
  // keeps its room until the answer comes, as the receiving node may still hold the message.
  Took reserve(uint32_t node, uint64_t bytes, Poller& poller, Clock::time_point deadline, bool& eager, Status& why);
  void unreserve(uint32_t node, uint64_t bytes, bool eager);
  // A send of message `id` whose data waits for the pull: awaits_pull before its header goes, and
  // pulled() tells whether the receive pulled it (once); forget_pull when the send returns, true
  // where a pull came that the send did not take (it gave up just then: the receive is told so).
  void awaits_pull(const Key& k, uint64_t id);
  bool pulled(const Key& k, uint64_t id);
  bool forget_pull(const Key& k, uint64_t id);
  // A pull from the receiver's node (frame p2p_pull): kept for the send that waits for it (true);
  // false for a message no send waits with (it gave up: the receive is told so).
  bool pull(const Key& k, uint64_t id);

  // ---- The receiver's side of a pull
  // Pulled data arrives as a p2p_body frame, named by the sending node and its number for the
  // message: body() says where it goes, the tensor of the receive that pulled it (nullptr without
  // `why`: read and dropped, as its receive gave up; with `why`: the node broke the rules); the
  // frame then ends whole (body_done: the receive wakes) or with its connection (body_failed).
  std::byte* body(uint32_t node, uint64_t id, uint64_t bytes, std::string& why);
  void body_done(uint32_t node, uint64_t id);
  void body_failed(uint32_t node, uint64_t id);
  // The receive that took message `id` (pulled) asks its node for the data, which lands in `into`
  // (`bytes` long): expect_pull before the pull goes, take_pulled for the outcome (ok once the
  // data is in; else why the sender has none: its send gave up), give_up_pull where it will not
  // wait longer (data that comes later is dropped). While the data is being written into `into`,
  // give_up_pull returns a word that rises to 1 once its frame ended: the receive must not
  // return (and free `into`) before.
  // expect_pull is false where a message of that id from `node` is still on its way (a broken sender).
  bool expect_pull(const Key& k, uint64_t id, uint32_t node, std::byte* into, uint64_t bytes);
  Took take_pulled(const Key& k, uint64_t id, uint32_t node, Poller& poller, Clock::time_point deadline,
                   Status& status, Status& why);
  std::shared_ptr<WaitWord> give_up_pull(const Key& k, uint64_t id, uint32_t node);
  // The sender's answer to a pull, without data (frame p2p_pulled): its send gave up. False where
  // no receive here pulled message `id` of k from `node` (the link is then ended).
  bool deliver_pulled(const Key& k, uint64_t id, uint32_t node, Status status);

 private:
  // The wait every take shares: the queue `pick()` names (box.end(): none yet; under mu_) gives
  // up its first entry (its key in `k`, when given), unless a node was lost, every node of `nodes`
  // left, `stop` holds, or the deadline passes.
  // `loan`: the message is lent (take_any's: it may come back, put_back), under the same lock.
  template <class T, class Pick>
  Took take_first(std::map<Key, std::deque<T>>& box, Pick pick, std::span<const uint32_t> nodes, Poller& poller,
                  Clock::time_point deadline, const std::function<bool()>* stop, Key* k, T& out, Status& why,
                  bool loan = false);
  void bump();
  void body_ended(uint32_t node, uint64_t id, bool whole);
  void release(uint32_t node, uint64_t data_bytes);  // under mu_: a message left this mailbox
  uint64_t post(const Key& k, std::function<bool()> waits);
  void unpost(uint64_t ticket);
  bool left_to_earlier(const Key& k, uint64_t ticket) const;  // under mu_
  // Whether a wait on `nodes` is over: a node was lost, or every one of them left (`why` says so).
  bool ended_locked(std::span<const uint32_t> nodes, Status& why) const;  // under mu_

  std::mutex mu_;  // a leaf: nothing else is locked, and nothing blocks, under it
  WaitWord word_;  // bumped whenever something arrives; the top once a node is lost
  std::map<Key, std::deque<Message>> inbox_;
  uint64_t delivered_ = 0;
  std::map<Key, std::deque<Answer>> answers_;
  struct Held {                 // what one node holds of another's: messages and their data's bytes
    uint32_t messages = 0;
    uint64_t bytes = 0;
  };
  struct Room {                 // a send's room in its destination node's windows
    uint32_t node = 0;
    uint64_t bytes = 0;         // 0 where its data waits for the pull
  };
  struct Body {                 // a pull's data on its way (p2p_body)
    Key k;
    std::byte* into = nullptr;      // the receive's tensor, `bytes` long
    uint64_t bytes = 0;
    bool writing = false;           // its frame is being read in
    bool given_up = false;          // its receive no longer waits
    std::shared_ptr<WaitWord> ended = std::make_shared<WaitWord>();  // 1 once its frame ended
  };
  struct Pulled {               // the outcome of a pull: its data is in, or why not
    uint64_t id = 0;
    Status status;
  };
  const P2PWindow window_;
  const uint64_t eager_;
  std::map<uint32_t, Held> held_;    // by sender node: messages in the inbox or lent
  std::map<uint32_t, Held> out_;     // by receiver node: this node's sends, unanswered
  std::set<std::pair<Key, uint64_t>> awaiting_pull_, pulls_;  // sends whose data waits; pulls for them
  std::set<std::pair<Key, uint64_t>> sending_;                // sends that may take an answer
  std::map<std::pair<uint32_t, uint64_t>, Body> bodies_;  // by (sender node, message id)
  std::map<Key, std::deque<Pulled>> pulled_;
  std::map<std::pair<Key, uint64_t>, Room> abandoned_;  // answers whose sends gave up on them, and their room
  std::map<std::pair<Key, uint64_t>, Room> lent_;       // messages take_any took, not kept or put back yet
  std::set<std::pair<Key, uint64_t>> withdrawn_lent_;  // ... and withdrawn meanwhile
  struct Post {
    Key k;
    std::function<bool()> waits;  // empty: for as long as it is posted
    std::optional<Landing> landing;  // while its receive waits in take_message
    bool landed = false;             // a message's data went into it (once)
    bool writing = false;            // ... and its frame is being read in
    std::shared_ptr<WaitWord> ended; // 1 once that frame ended
  };
  void disarm(uint64_t ticket);  // under mu_: no data lands in its tensor any more
  // Under mu_: the message whose data landed in receive `ticket`'s tensor, out of the inbox.
  std::optional<Message> take_landed_locked(const Key& k, uint64_t ticket);
  std::map<uint64_t, Post> posted_;     // the receives posted, by ticket (in the order of their calls)
  uint64_t landings_ = 0;               // messages delivered whose data landed in their receive's tensor
  uint64_t tickets_ = 0;
  std::optional<Status> lost_;          // a node died: every pair fails
  std::map<uint32_t, Status> gone_;     // nodes that left in order: pairs with them fail
};

} // namespace chorus
