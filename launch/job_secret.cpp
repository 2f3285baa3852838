#include "launch/job_secret.hpp"

#include <cstdlib>

#include "core/secret.hpp"

namespace chorus::launch {

Result<std::string> job_secret(const std::string& secret_file) {
  // --secret-file, else CHORUS_SECRET_FILE, else CHORUS_SECRET: Config::from_env's order.
  const char* env_file = std::getenv("CHORUS_SECRET_FILE");
  const std::string file = !secret_file.empty() ? secret_file : (env_file != nullptr ? env_file : "");
  if (!file.empty()) {
    auto s = read_secret_file(file);
    if (!s) return s.status();
    if (s->empty()) return Status(Errc::invalid_argument, "the secret file " + file + " starts with an empty line");
    return s;
  }
  std::string s = secret_from_env();
  if (s.find('\n') != std::string::npos)
    return Status(Errc::invalid_argument, "CHORUS_SECRET holds a newline (a secret is one line)");
  if (!s.empty()) return s;
  return draw_secret();
}

} // namespace chorus::launch
