#include "launch/job_secret.hpp"

#include "core/secret.hpp"

namespace chorus::launch {

Result<std::string> job_secret(const std::string& secret_file) {
  if (!secret_file.empty()) {
    auto s = read_secret_file(secret_file);
    if (!s) return s.status();
    if (s->empty()) return Status(Errc::invalid_argument, "the secret file " + secret_file + " starts with an empty line");
    return s;
  }
  std::string s = secret_from_env();
  if (s.find('\n') != std::string::npos)
    return Status(Errc::invalid_argument, "CHORUS_SECRET holds a newline (a secret is one line)");
  if (!s.empty()) return s;
  return draw_secret();
}

} // namespace chorus::launch
