#include "transport/shm/segment.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace chorus {

Result<SharedSegment> SharedSegment::make(const char* name, std::size_t bytes) {
  SharedSegment s;
  s.memfd_ = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (s.memfd_ < 0) return Status(Errc::internal, std::string("memfd_create: ") + std::strerror(errno));
  struct stat st {};
  void* base = MAP_FAILED;
  if (ftruncate(s.memfd_, static_cast<off_t>(bytes)) == 0 &&
      fcntl(s.memfd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0 && fstat(s.memfd_, &st) == 0)
    base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, s.memfd_, 0);
  if (base == MAP_FAILED)
    return Status(Errc::internal, std::string("shared memory (") + std::to_string(bytes >> 10) + " KiB): " +
                                      std::strerror(errno));
  s.base_ = base;
  s.bytes_ = bytes;
  s.dev_ = static_cast<uint64_t>(st.st_dev);
  s.inode_ = static_cast<uint64_t>(st.st_ino);
  return s;
}

SharedSegment::~SharedSegment() {
  if (base_) munmap(base_, bytes_);
  forget_descriptor();
}

SharedSegment::SharedSegment(SharedSegment&& o) noexcept
    : memfd_(std::exchange(o.memfd_, -1)),
      base_(std::exchange(o.base_, nullptr)),
      bytes_(std::exchange(o.bytes_, 0)),
      dev_(o.dev_),
      inode_(o.inode_) {}

SharedSegment& SharedSegment::operator=(SharedSegment&& o) noexcept {
  if (this != &o) {
    if (base_) munmap(base_, bytes_);
    forget_descriptor();
    memfd_ = std::exchange(o.memfd_, -1);
    base_ = std::exchange(o.base_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    dev_ = o.dev_;
    inode_ = o.inode_;
  }
  return *this;
}

void SharedSegment::forget_descriptor() {
  if (memfd_ >= 0) ::close(memfd_);
  memfd_ = -1;
}

void* SharedSegment::release_mapping() {
  forget_descriptor();
  bytes_ = 0;
  return std::exchange(base_, nullptr);
}

SharedSegment::Offer SharedSegment::describe() const {
  Offer o;
  o.pid = getpid();
  o.fd = memfd_;
  o.bytes = bytes_;
  o.dev = dev_;
  o.inode = inode_;
  return o;
}

Status SharedSegment::offer(int fd, TlsChannel* tls, Clock::time_point deadline, bool& attached) const {
  const Offer o = describe();
  if (auto s = TlsChannel::write_all(fd, tls, &o, sizeof o, deadline); !s.is_ok()) return s;
  uint8_t answer = 0;
  if (auto s = TlsChannel::read_exact(fd, tls, &answer, 1, deadline); !s.is_ok()) return s;
  attached = answer == 1;
  return Status::ok();
}

Status SharedSegment::answer(int fd, TlsChannel* tls, bool attached, Clock::time_point deadline) {
  const uint8_t a = attached ? 1 : 0;
  return TlsChannel::write_all(fd, tls, &a, 1, deadline);
}

Result<SharedSegment> SharedSegment::take_offer(int fd, TlsChannel* tls, std::size_t max_bytes,
                                                Clock::time_point deadline, std::string& why) {
  Offer o;
  if (auto s = TlsChannel::read_exact(fd, tls, &o, sizeof o, deadline); !s.is_ok()) return s;
  return take(o, max_bytes, why);
}

Result<SharedSegment> SharedSegment::take(const Offer& o, std::size_t max_bytes, std::string& why) {
  if (o.magic == Offer{}.magic && o.bytes == 0) {
    why = "the other side offered no segment (it could not make one)";
    return SharedSegment{};
  }
  if (o.magic != Offer{}.magic || o.bytes > max_bytes) {
    why = "a garbled shared-memory offer";
    return SharedSegment{};
  }
  const std::string path = "/proc/" + std::to_string(o.pid) + "/fd/" + std::to_string(o.fd);
  SharedSegment seg;
  seg.memfd_ = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (seg.memfd_ < 0) {
    why = "cannot open the other process's segment (" + path + "): " + std::strerror(errno);
    return SharedSegment{};
  }
  // The very segment offered (not what that path names in another PID namespace), sealed at the
  // size offered, before anything of it is touched.
  struct stat st {};
  const int seals = fcntl(seg.memfd_, F_GET_SEALS);
  if (fstat(seg.memfd_, &st) != 0 || !S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_dev) != o.dev ||
      static_cast<uint64_t>(st.st_ino) != o.inode || static_cast<uint64_t>(st.st_size) != o.bytes || seals < 0 ||
      (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW)) {
    why = path + " is not the segment offered (another PID namespace?)";
    return SharedSegment{};
  }
  void* base = mmap(nullptr, o.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, seg.memfd_, 0);
  if (base == MAP_FAILED) {
    why = std::string("cannot map the other process's segment: ") + std::strerror(errno);
    return SharedSegment{};
  }
  seg.base_ = base;
  seg.bytes_ = o.bytes;
  seg.dev_ = o.dev;
  seg.inode_ = o.inode;
  seg.forget_descriptor();  // mapped: the descriptor is not needed (and no one else should open it)
  return seg;
}

} // namespace chorus
