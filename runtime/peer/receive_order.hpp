// MPI's order of posting for one handle's receives (docs/work.md, "Order and concurrency").
// Receives run on lanes per (source, tag), so a receive from any source and one from a given rank,
// called one after the other, could reach the local server or the node's mailbox in either order.
// Each takes a ticket at its call (post). One that may take what an earlier one may (the same
// tag, and the same source or either from any source) enters only once that one has entered
// (wait_turn): the local server then pairs sends in entry order, and the node's mailbox leaves a
// message to the earliest ticket waiting for it (P2PMailbox::post). Every receive passes here, so
// the common case (nothing to wait for) costs three uncontended locks and no allocation.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include <chorus/status.hpp>
#include "core/wait.hpp"

namespace chorus::peer_impl {

class ReceiveOrder {
 public:
  // One receive's place: entered() once it waits where sends find it; let go when it goes (the
  // receive ended, or never ran), which also lets later receives enter.
  class Place {
   public:
    Place() = default;
    Place(Place&& o) noexcept : order_(o.order_), ticket_(o.ticket_) { o.order_ = nullptr; }
    Place& operator=(Place&&) = delete;
    Place(const Place&) = delete;
    ~Place();
    uint64_t ticket() const { return ticket_; }  // 0: none
    // Until every earlier receive that may take this one's messages has entered; false once
    // `within` has passed.
    bool wait_turn(std::chrono::milliseconds within) const;
    void entered() const;

   private:
    friend class ReceiveOrder;
    Place(ReceiveOrder* order, uint64_t ticket) : order_(order), ticket_(ticket) {}
    ReceiveOrder* order_ = nullptr;
    uint64_t ticket_ = 0;
  };

  // At the receive's call. `source`: the rank, or kAnySource. Tickets rise across the process,
  // so that the node's mailbox can compare those of every handle.
  Place post(uint32_t source, uint64_t tag);

 private:
  struct Waiting {
    uint64_t ticket;
    uint32_t source;
    uint64_t tag;
    bool entered;
  };
  bool blocked(uint64_t ticket);  // under mu_
  void change(uint64_t ticket, bool gone);

  std::mutex mu_;  // a leaf: nothing blocks under it
  std::vector<Waiting> waiting_;  // the receives posted and not ended, by rising ticket
  // How many of waiting_ have not entered: 1 (this receive's own) means none can block it, and
  // its turn is taken without the lock.
  std::atomic<uint32_t> unentered_{0};
  std::atomic<uint32_t> turn_waiters_{0};  // threads in wait_turn (only then is the word bumped)
  WaitWord word_;  // bumped when one enters or goes while somebody waits for its turn
};

// The error of a receive (`what`) whose turn did not come within `timeout`.
Status turn_not_taken(const std::string& what, std::chrono::milliseconds timeout);

} // namespace chorus::peer_impl
