// The bytes of a data connection between two processes of one host, through shared memory: two
// single-producer single-consumer rings (one per direction) in an anonymous segment (memfd), so
// nothing is left in /dev/shm or the file system after any exit, SIGKILL included.
// The pair's socket stays open beside the rings: it says when the other process is gone (a ring
// cannot tell that its writer died) and carries wake-ups, one byte, written only when the reader
// sleeps in epoll. A writer that finds the ring full sleeps on a futex in the segment, woken by the
// reader only when it said it sleeps; so the fast path makes no system call.
// The segment's creator (the node that accepted the connection) offers it over the socket
// (segment.hpp); the other checks the collective and token written in it and answers; then both
// close their descriptors (the mappings stay), so no other process can open the segment. Refused
// (other user, another PID namespace), both stay on the socket. The offer goes only to a node
// whose hello carried the collective's token.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <chorus/result.hpp>
#include "core/wait.hpp"
#include "transport/shm/segment.hpp"
#include "transport/tls/tls_channel.hpp"

namespace chorus {

class ShmChannel {
 public:
  // The rings' capacity per direction (CHORUS_SHM_RING_KIB overrides, 64 KiB at least).
  static std::size_t ring_bytes();

  // The creator: a new segment for the collective, offered over `fd` (through `tls` when the
  // socket has it) once the pair's hello is done. A null channel: the other side declined, and the
  // socket carries the bytes.
  static Result<std::unique_ptr<ShmChannel>> offer(int fd, TlsChannel* tls, uint64_t collective, uint64_t token,
                                                   Clock::time_point deadline);
  // The other side: reads the offer and attaches, or declines when it cannot (null channel, the
  // reason in `why`).
  static Result<std::unique_ptr<ShmChannel>> accept(int fd, TlsChannel* tls, uint64_t collective, uint64_t token,
                                                    Clock::time_point deadline, std::string& why);
  ~ShmChannel();
  ShmChannel(const ShmChannel&) = delete;
  ShmChannel& operator=(const ShmChannel&) = delete;

  // Copies up to n bytes into the outgoing ring behind what is already there; returns how many
  // fit (0 when full). The reader sees them at the next publish().
  std::size_t write_some(const void* p, std::size_t n);
  // Makes what was written visible, and wakes the reader (a byte on the socket) when it sleeps:
  // once per frame, and every 64 KiB of a large one (so the reader copies out while the writer
  // copies in).
  void publish();
  // Written but not yet published.
  std::size_t unpublished() const;
  // Waits (bounded, in slices) until the outgoing ring has room; false when closed or at `until`.
  bool wait_for_room(Clock::time_point until);
  // Reads what the incoming ring holds (up to n) without blocking, like recv(MSG_DONTWAIT): > 0
  // bytes; 0 when the other side is gone and the ring is empty (-1 with ECONNRESET when it cut the
  // connection off, mark_cut); -1 with errno EAGAIN when nothing is there.
  long read_some(void* p, std::size_t n);
  // Bytes wait in the incoming ring (no system call).
  bool has_bytes() const;
  // Before the reader sleeps on the socket: asks the writer for a wake-up byte; false when bytes
  // came meanwhile (read them instead of sleeping).
  bool arm();
  // Ends waits for room at once (the connection was killed).
  void close();
  // Before the socket is reset to cut the connection off (a stall): the other side's reader, once
  // the socket ends and the ring is empty, reads a reset (-1, ECONNRESET) rather than an end (0),
  // since a reset alone here means the other process is gone (unread wake-up bytes reset it).
  void mark_cut();
  // After the reader woke (for any reason): no wake-up bytes wanted until it arms again.
  void disarm();

  struct Ring;      // one direction's control words and bytes (in the segment)
  struct Segment;   // the segment's layout

 private:
  ShmChannel(int fd, SharedSegment segment, std::size_t cap, bool creator);
  int fd_;                 // the pair's socket (not owned)
  SharedSegment segment_;  // its descriptor closed once both sides mapped it
  Ring* out_;
  Ring* in_;
  std::byte* out_data_;
  std::byte* in_data_;
  std::size_t cap_;
  std::atomic<bool> closed_{false};
  bool peer_gone_ = false;  // the socket ended (reader only)
  bool armed_ = false;      // a wake byte may be owed since the last empty read (reader only)
  uint64_t pending_ = 0;    // the writer's head, ahead of the published one (writer only)
};

} // namespace chorus
