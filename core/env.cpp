#include "core/env.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>

namespace chorus {

std::optional<std::string> env_text(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

std::optional<uint64_t> whole_number(std::string_view text, uint64_t min, uint64_t max) {
  uint64_t v = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc{} || p != end || v < min || v > max) return std::nullopt;
  return v;
}

Result<std::optional<uint64_t>> env_number(const char* name, uint64_t min, uint64_t max) {
  auto text = env_text(name);
  if (!text) return std::optional<uint64_t>{};
  auto v = whole_number(*text, min, max);
  if (!v)
    return Status(Errc::invalid_config, std::string(name) + "='" + *text + "' is not a whole number from " +
                                            std::to_string(min) + " to " + std::to_string(max));
  return std::optional<uint64_t>{*v};
}

Status make_private_dir(const std::string& dir, const char* what) {
  const std::string named = std::string("the ") + what + " directory " + dir;
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return {Errc::invalid_config, "cannot make " + named + ": " + std::strerror(errno)};
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return {Errc::invalid_config, "cannot look at " + named + ": " + std::strerror(errno)};
  if (!S_ISDIR(st.st_mode) || st.st_uid != ::getuid() || (st.st_mode & 077) != 0)
    return {Errc::invalid_config, named + " is not this user's private directory (a directory owned by this user, mode 0700)"};
  return Status::ok();
}

std::string private_file_dir() {
  auto runtime = env_text("XDG_RUNTIME_DIR");
  if (runtime && ::access(runtime->c_str(), W_OK | X_OK) != 0) runtime.reset();  // named, but not there
  return runtime ? *runtime + "/chorus" : env_text("TMPDIR").value_or("/tmp") + "/chorus-" + std::to_string(getuid());
}

} // namespace chorus
