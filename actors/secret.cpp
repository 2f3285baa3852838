#include "actors/secret.hpp"

#include <cstdlib>
#include <fstream>

namespace chorus {

std::string secret_from_env() {
  const char* env = std::getenv("CHORUS_SECRET");
  return env ? env : "";
}

Result<std::string> read_secret_file(const std::string& path) {
  std::ifstream f(path);
  std::string secret;
  if (!f || !std::getline(f, secret)) return Status(Errc::invalid_argument, "cannot read the secret from " + path);
  return secret;
}

} // namespace chorus
