#include "transport/own_connection.hpp"

#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>

namespace chorus {

namespace {

struct Ends {
  sockaddr_storage near{}, far{};
  bool known = false;
};

Ends ends_of(int fd) {
  Ends e;
  socklen_t a = sizeof e.near, b = sizeof e.far;
  e.known = getsockname(fd, reinterpret_cast<sockaddr*>(&e.near), &a) == 0 &&
            getpeername(fd, reinterpret_cast<sockaddr*>(&e.far), &b) == 0;
  return e;
}

bool same(const sockaddr_storage& x, const sockaddr_storage& y) {
  if (x.ss_family != y.ss_family) return false;
  if (x.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(x);
    const auto& b = reinterpret_cast<const sockaddr_in&>(y);
    return a.sin_port == b.sin_port && a.sin_addr.s_addr == b.sin_addr.s_addr;
  }
  if (x.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(x);
    const auto& b = reinterpret_cast<const sockaddr_in6&>(y);
    return a.sin6_port == b.sin6_port && std::memcmp(&a.sin6_addr, &b.sin6_addr, sizeof a.sin6_addr) == 0;
  }
  return false;
}

} // namespace

bool opened_by_this_process(int accepted_fd) {
  const Ends mine = ends_of(accepted_fd);
  if (!mine.known) return false;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return false;
  bool found = false;
  while (dirent* d = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(d->d_name, &end, 10);
    if (end == d->d_name || *end != '\0' || fd == accepted_fd || fd == dirfd(dir)) continue;
    struct stat st{};
    if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    const Ends other = ends_of(static_cast<int>(fd));
    if (other.known && same(other.near, mine.far) && same(other.far, mine.near)) {
      found = true;
      break;
    }
  }
  closedir(dir);
  return found;
}

} // namespace chorus
