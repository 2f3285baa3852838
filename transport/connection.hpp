// The seam between two nodes (in the style of Gloo's transport::Pair): one Connection per pair of
// nodes, whatever carries the bytes. transport/tcp/ is a TCP socket (TLS over it when the
// connection has a TLS channel); a pair within one host may carry them in shared memory instead,
// its receive side a ring plus a wakeup fd. Callers (the global client, the Poller) see only this.
// Sends: a frame is a SendTicket; frames leave in the order they were queued, and the ticket says
// when its bytes have left (the payload memory must stay untouched until then). Receives: whoever
// leads the node's Poller (transport/poller.hpp) pumps the connection when its wait_fd() is
// readable; the pump reads what has arrived without blocking and hands frames to a FrameSink piece
// by piece, so a consumer can reduce the first megabytes of a large frame while the rest is still
// on the way. One virtual call per frame sent and per pump, never per byte.
#pragma once
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/wait.hpp"
#include "transport/frame.hpp"

namespace chorus {

// One queued send: a frame (header, optional prefix, payload), optionally preceded by whole frames.
struct SendTicket {
  WaitWord done;      // 1: the bytes have left; 2: failed or cancelled (the bytes were not all sent)
  FrameHeader header;
  const std::byte* payload = nullptr;
  std::string owned;     // small payloads the ticket owns (control frames)
  std::string preamble;  // whole frames sent before this one in the same call (coalescing)
  std::string prefix;    // sent between header and payload (counted in header.bytes)
  std::size_t total() const { return preamble.size() + sizeof(FrameHeader) + header.bytes; }
  // The transport's progress through the ticket: bytes of preamble + header + payload taken so far
  // (a send from the caller's thread may stop short), and bytes made from them for the wire (TLS
  // records) not all written yet; the next writer sends those first, so nothing reorders.
  std::size_t sent = 0;
  std::string staged;
  std::size_t staged_sent = 0;
  bool written() const { return sent == total() && staged.empty(); }

  // A frame whose payload (h.bytes) is the caller's memory.
  static std::shared_ptr<SendTicket> of(FrameHeader h, const std::byte* payload);
  // A frame whose payload the ticket owns (h.bytes is set from it).
  static std::shared_ptr<SendTicket> owning(FrameHeader h, std::string payload);
  // One frame whose payload is `prefix` followed by payload_bytes at `payload` (e.g. a message
  // header and the tensor it describes: never split by another sender's frame).
  static std::shared_ptr<SendTicket> prefixed(FrameHeader h, std::string prefix, const std::byte* payload,
                                              std::size_t payload_bytes);
  // A frame from the caller's memory, preceded by `preamble` (complete frames, e.g. an
  // announcement): one system call where there would be two.
  static std::shared_ptr<SendTicket> after(std::string preamble, FrameHeader h, const std::byte* payload);
  // Whole frames (header and payload each) as they are, in one write.
  static std::shared_ptr<SendTicket> frames(std::string frames);
};

class Connection {
 public:
  explicit Connection(uint32_t node) : node_(node) {}
  virtual ~Connection() = default;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  uint32_t node() const { return node_.load(std::memory_order_relaxed); }  // the node at the other end
  // The stamp of the membership epoch the connection serves (FrameHeader::magic_of): frames with
  // another one arrive from an earlier epoch and are dropped.
  uint32_t magic() const { return magic_.load(std::memory_order_relaxed); }

  // The connection goes on into its collective's next membership epoch (a shrink or grow keeps
  // the links between members), where the other end is node `node`, frames carry `magic` and go
  // to `sink`. Only while nobody pumps it (the earlier epoch's poller stopped, the next one's not
  // started): a frame half read is dropped (its old sink told, frame_failed), and so is every
  // frame still to come from an earlier epoch; one of the new epoch that came early, at which the
  // old one parked (pump), is the first the new sink gets. What the earlier epoch queued and did
  // not begin is failed; a frame of it whose bytes have begun is written out, ahead of the new
  // epoch's (the other side drops it), since its op reads its memory until then. False when the
  // connection has ended or been killed: it cannot be kept.
  virtual bool rehome(uint32_t node, uint32_t magic, FrameSink* sink) = 0;
  // Whether the link ended on this side (its reader saw the end, or it was killed or cut), which
  // the other side may not know yet: rehome() refuses it.
  virtual bool ended() const = 0;
  // Fault tests: ends the link on this side as a cut would, telling the other side nothing (a
  // cut whose reset was lost on the way, or a side that stood still until the link ended here).
  virtual void drop_silently() = 0;

  // Queues the ticket and gets it moving; small frames may be written by the calling thread
  // (never blocking) when the line is free. Returns the ticket.
  virtual std::shared_ptr<SendTicket> send(std::shared_ptr<SendTicket> t) = 0;
  // send() in two halves, for a caller that must fix the order of frames under its own lock:
  // queue() takes the ticket's place in line and writes nothing (it never blocks); push(), called
  // once that lock is released, gets what is queued moving (as send() does). Every queue() needs
  // a later push().
  virtual void queue(std::shared_ptr<SendTicket> t) = 0;
  virtual void push() = 0;
  // Shuts the connection at once: blocked writes return, queued sends fail, the next pump() ends
  // the connection. Thread-safe.
  virtual void kill() = 0;
  // kill(), and the other side sees the connection reset rather than ended (FrameSink::broken, not
  // closed): a node that cuts a stalled link off is not taken for one whose process exited.
  virtual void cut() { kill(); }
  // kill() (reset: cut()) only while the connection still serves the epoch stamped `magic`: an
  // earlier epoch's client never ends a link a later one kept (checked against rehome under one
  // lock). False when it did not.
  virtual bool kill_if(uint32_t magic, bool reset) = 0;
  // Its sender gives up on `t` and releases its memory, which nothing may read afterwards: queued
  // and not begun, it leaves the queue (failed); begun or being written, it cannot be taken back,
  // and the connection is cut, whatever epoch it serves now (a later one keeps a frame of the
  // earlier one that had begun: rehome), and its reader tells its sink the link broke. False when
  // `t` was not there.
  virtual bool abandon(const SendTicket& t) = 0;
  // While bytes this side sent (or queued in the kernel) wait for the other side's acknowledgment:
  // how long since the last acknowledgment came; nullopt when none wait, when the other side's
  // window is closed (it lives and does not read: busy or frozen, its kernel still answers), or
  // when the transport cannot tell. A system call: for waits that take long, never per frame.
  virtual std::optional<std::chrono::milliseconds> since_ack() const { return std::nullopt; }
  // Sends a bye frame, waits (bounded) for the queue to drain, then kills the connection.
  void close(std::chrono::milliseconds drain = std::chrono::milliseconds(2000));

  // Readable when pump() has something to do (a socket, or a wakeup eventfd).
  virtual int wait_fd() const = 0;
  // A connection in shared memory tells without a system call that bytes wait (a waiting thread
  // looks for a moment before it sleeps), and must be told before wait_fd() is slept on, since its
  // writer signals wait_fd() only then: arm() returns false when bytes came meanwhile (pump
  // instead of sleeping). Sockets: never ready this way, always armed.
  virtual bool ready() const { return false; }
  virtual bool arm() { return true; }
  virtual void disarm() {}  // the waiting thread woke: no wake-ups wanted until it arms again
  virtual bool spins() const { return false; }
  // Reads what has arrived (up to about `budget` bytes) without blocking and hands it to the sink.
  // idle: nothing more to read until wait_fd() is readable again; more: the budget ran out with
  // bytes still waiting (pump again without waiting); ended: the connection has ended (the sink
  // was told, unless we closed or killed it) and must not be pumped again; parked: the next frame
  // belongs to a later membership epoch, which this one must not read (it waits, unread, for
  // rehome; the pumping poller forgets the connection). One thread at a time.
  enum class Pumped { idle, more, ended, parked };
  virtual Pumped pump(std::size_t budget = std::size_t{4} << 20) = 0;
  // Once nobody pumps any more (the poller stopped): a frame still arriving fails, so that whoever
  // waits for it lets go.
  virtual void stop_reading() = 0;

 protected:
  void set_home(uint32_t node, uint32_t magic) {
    node_.store(node, std::memory_order_relaxed);
    magic_.store(magic, std::memory_order_relaxed);
  }

 private:
  std::atomic<uint32_t> node_;
  std::atomic<uint32_t> magic_{FrameHeader::kMagic};
};

} // namespace chorus
