// An anonymous shared-memory segment (memfd) handed from one process of a host to another over
// their socket, so that nothing is left in /dev/shm or the file system after any exit, SIGKILL
// included. The maker seals it at its size (nobody can shrink it under a mapping, SIGBUS, or grow
// it) and offers it as its pid and descriptor number; the other opens /proc/PID/fd/N (same user,
// same PID namespace), checks that it is the very segment offered (device, inode, size, seals),
// maps it, checks what the maker wrote in it, and answers. Once every process it was offered to
// has answered, the maker closes its descriptor (the mappings stay), so that no other process can
// open it any more. The offer goes only to a process that proved it belongs to the job first (the
// data hello).
// Used by the rings of a pair of nodes (shm_channel.hpp) and by the arena of a host's nodes
// (strategies/arena.hpp, set up in mesh/data_mesh.cpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include <chorus/result.hpp>
#include "core/wait.hpp"
#include "transport/tls/tls_channel.hpp"

namespace chorus {

class SharedSegment {
 public:
  SharedSegment() = default;
  // A new sealed segment of `bytes`, mapped; `name` shows in /proc/PID/maps.
  static Result<SharedSegment> make(const char* name, std::size_t bytes);
  // The other side of an offer: reads it from `fd` and maps the segment it names, at most
  // `max_bytes`. An empty segment (and `why`) where it cannot: the caller then declines.
  static Result<SharedSegment> take_offer(int fd, TlsChannel* tls, std::size_t max_bytes, Clock::time_point deadline,
                                          std::string& why);
  ~SharedSegment();
  SharedSegment(SharedSegment&& o) noexcept;
  SharedSegment& operator=(SharedSegment&& o) noexcept;
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;

  // The other side of an offer that came some other way (a frame on a data connection).
  struct Offer;
  static Result<SharedSegment> take(const Offer& o, std::size_t max_bytes, std::string& why);
  // What offer() sends: this segment, for take() (an empty segment offers none).
  Offer describe() const;
  // Offers this segment over `fd`; `attached` says what the other side answered. An empty
  // segment offers none (the other side declines), so that both keep to the protocol.
  Status offer(int fd, TlsChannel* tls, Clock::time_point deadline, bool& attached) const;
  // The taker's answer, once it has checked what the segment holds.
  static Status answer(int fd, TlsChannel* tls, bool attached, Clock::time_point deadline);
  // Closes the descriptor; the mapping stays (see above).
  void forget_descriptor();
  // Hands the mapping over (to be unmapped with munmap(base, bytes)); the segment is empty after.
  void* release_mapping();

  bool mapped() const { return base_ != nullptr; }
  void* base() const { return base_; }
  std::size_t bytes() const { return bytes_; }

  // What the maker sends (then one byte answers: 1 attached, 0 declined). `dev`/`inode` name the
  // segment itself: /proc/PID/fd/N read in another PID namespace (two containers sharing a
  // network) is another process's descriptor, which must not be taken for it.
  struct Offer {
    uint64_t magic = 0x43484f52534d3031;  // "CHORSM01"
    int64_t pid = 0;
    int64_t fd = 0;
    uint64_t bytes = 0;
    uint64_t dev = 0;
    uint64_t inode = 0;
  };

 private:
  int memfd_ = -1;
  void* base_ = nullptr;
  std::size_t bytes_ = 0;
  uint64_t dev_ = 0, inode_ = 0;
};

} // namespace chorus
