#include "core/whole_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace chorus {

namespace {
std::atomic<uint64_t> part_number{0};
}

std::string beside(const std::string& path) {
  return path + ".part" + std::to_string(::getpid()) + "." + std::to_string(part_number.fetch_add(1));
}

bool write_all(int fd, std::string_view text) {
  for (std::size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) errno = EIO;  // wrote nothing and said no error: as good as one
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

std::optional<std::string> replace_whole(const std::string& path, std::string_view text, mode_t mode) {
  // A name that is taken (a part left by a process that died before its rename, under a pid used
  // again, or a link planted there) is passed over for the next.
  std::string tmp;
  int fd = -1;
  for (int tries = 0; fd < 0 && tries < 100; ++tries) {
    tmp = beside(path);
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) return "cannot write " + tmp + ": " + std::strerror(errno);
  const bool written = write_all(fd, text);
  const int write_errno = errno;
  if (::close(fd) != 0 || !written) {
    const std::string why = std::strerror(written ? errno : write_errno);
    std::remove(tmp.c_str());
    return "cannot write " + tmp + ": " + why;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    return "cannot rename " + tmp + " to " + path + ": " + why;
  }
  return std::nullopt;
}

} // namespace chorus
