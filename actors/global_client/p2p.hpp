// Point to point across nodes: the messages that other nodes' peers sent to ours and the answers to
// our own sends, matched FIFO per (group, source, destination, tag): as within a node, a receive
// takes only its own handle's messages. The frame routing delivers them;
// GlobalClient::send and recv (p2p.cpp) take them, waiting through the poller.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
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

class P2PMailbox {
 public:
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
    std::string bytes;   // the whole payload: the P2PHeader message, then the data from `offset`
    std::size_t offset;
    Status failed;       // the sender could not send (then there is no data)
    uint64_t id = 0;     // the sender node's number for it, which the answer names
  };
  // An answer to one of this node's sends: the message it answers (Message::id) and its status.
  struct Answer {
    uint64_t id = 0;
    Status status;
  };

  void deliver(const Key& k, Message m);
  void answer(const Key& k, uint64_t id, Status s);
  // Takes back message `id` for k if no receive took it yet (its send timed out): true if it was here.
  bool withdraw(const Key& k, uint64_t id);
  // The send of message `id` gives up on its answer: dropped when it comes; or returned, where it
  // came just now.
  std::optional<Status> abandon(const Key& k, uint64_t id);
  void node_lost(const Status& why);                 // every pair fails
  void node_left(uint32_t node, const Status& why);  // pairs with that node fail

  // A receive posted here at its call (MPI's order of posting; runtime/peer/posted_recv.hpp), for
  // as long as it lives: a message that a receive posted before it may take is left to that one.
  // `k.source` may be kAnySource. Its ticket goes to the takes (0: none, in no line).
  class Posted {
   public:
    Posted(P2PMailbox& box, const Key& k) : box_(box), ticket_(box.post(k)) {}
    Posted(const Posted&) = delete;
    Posted& operator=(const Posted&) = delete;
    ~Posted() { box_.unpost(ticket_); }
    uint64_t ticket() const { return ticket_; }

   private:
    P2PMailbox& box_;
    uint64_t ticket_;
  };

  // Waits for the first message (answer) for k from `node`: `it` (out is filled), `ended` (`why`
  // is the loss or goodbye that ended the wait) or `nothing` (the deadline passed). `ticket`: the
  // receive's Posted (0: none).
  enum class Took { it, ended, nothing, stopped };
  Took take_message(const Key& k, uint32_t node, Poller& poller, Clock::time_point deadline, Message& out,
                    Status& why, uint64_t ticket = 0);
  // The answer to message `id` (answers to earlier messages of k, whose sends gave up, are dropped).
  Took take_answer(const Key& k, uint64_t id, uint32_t node, Poller& poller, Clock::time_point deadline, Status& out,
                   Status& why);
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

 private:
  template <class T>
  Took take(std::map<Key, std::deque<T>>& box, const Key& k, uint32_t node, Poller& poller,
            Clock::time_point deadline, T& out, Status& why, uint64_t ticket);
  // The wait both takes share: the queue `pick()` names (box.end(): none yet; under mu_) gives
  // up its first entry (its key in `k`, when given), unless a node was lost, every node of `nodes`
  // left, `stop` holds, or the deadline passes.
  // `loan`: the message is lent (take_any's: it may come back, put_back), under the same lock.
  template <class T, class Pick>
  Took take_first(std::map<Key, std::deque<T>>& box, Pick pick, std::span<const uint32_t> nodes, Poller& poller,
                  Clock::time_point deadline, const std::function<bool()>* stop, Key* k, T& out, Status& why,
                  bool loan = false);
  void bump();
  uint64_t post(const Key& k);
  void unpost(uint64_t ticket);
  bool left_to_earlier(const Key& k, uint64_t ticket) const;  // under mu_

  std::mutex mu_;  // a leaf: nothing else is locked, and nothing blocks, under it
  WaitWord word_;  // bumped whenever something arrives; the top once a node is lost
  std::map<Key, std::deque<Message>> inbox_;
  uint64_t delivered_ = 0;
  std::map<Key, std::deque<Answer>> answers_;
  std::set<std::pair<Key, uint64_t>> abandoned_;  // answers whose sends gave up on them
  std::set<std::pair<Key, uint64_t>> lent_;       // messages take_any took, not kept or put back yet
  std::set<std::pair<Key, uint64_t>> withdrawn_lent_;  // ... and withdrawn meanwhile
  std::map<uint64_t, Key> posted_;      // the receives posted, by ticket (in the order of their calls)
  uint64_t tickets_ = 0;
  std::optional<Status> lost_;          // a node died: every pair fails
  std::map<uint32_t, Status> gone_;     // nodes that left in order: pairs with them fail
};

} // namespace chorus
