#include "launch/program_path.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace chorus::launch {

namespace {

Status cannot_run(const std::string& name, int err) {
  return Status(Errc::invalid_argument, name + ": " + std::strerror(err));
}

} // namespace

Result<std::string> find_program(const std::string& name) {
  if (name.empty()) return cannot_run(name, ENOENT);
  if (name.find('/') != std::string::npos) {
    // execve says the same later; saying it now starts nothing for a program that cannot run.
    struct stat st{};
    if (stat(name.c_str(), &st) != 0) return cannot_run(name, errno);
    if (S_ISDIR(st.st_mode) || access(name.c_str(), X_OK) != 0) return cannot_run(name, EACCES);
    return name;
  }
  const char* env_path = std::getenv("PATH");
  const std::string_view path = env_path ? env_path : "/usr/local/bin:/usr/bin:/bin";
  bool denied = false;
  std::size_t from = 0;
  while (from <= path.size()) {
    const std::size_t colon = std::min(path.find(':', from), path.size());
    std::string dir(path.substr(from, colon - from));
    from = colon + 1;
    if (dir.empty()) dir = ".";  // an empty entry is the working directory, as for execvp
    const std::string candidate = dir + "/" + name;
    struct stat st{};
    if (stat(candidate.c_str(), &st) != 0 || S_ISDIR(st.st_mode)) continue;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    denied = true;
  }
  return cannot_run(name, denied ? EACCES : ENOENT);
}

} // namespace chorus::launch
