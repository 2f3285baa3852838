#include "launch/job_secret.hpp"

#include <cstdlib>

#include "core/secret.hpp"
#include "core/settings.hpp"

namespace chorus::launch {

Result<std::string> job_secret(const std::string& secret_file) {
  // --secret-file, else CHORUS_SECRET_FILE, else CHORUS_SECRET: Config::from_env's order.
  const std::string file = !secret_file.empty() ? secret_file : setting_text(SettingId::secret_file).value_or("");
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
