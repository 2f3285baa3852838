#include "core/secret.hpp"

#include "core/settings.hpp"

#include <sys/random.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace chorus {

std::string secret_from_env() {
  return setting_text(SettingId::secret).value_or("");
}

Result<std::string> read_secret_file(const std::string& path) {
  std::ifstream f(path);
  std::string secret;
  if (!f || !std::getline(f, secret)) return Status(Errc::invalid_argument, "cannot read the secret from " + path);
  return secret;
}

Status random_bytes(void* out, std::size_t size) {
  auto* bytes = static_cast<unsigned char*>(out);
  for (std::size_t got = 0; got < size;) {
    const ssize_t n = getrandom(bytes + got, size - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status(Errc::internal, std::string("no random bytes: ") + std::strerror(errno));
    got += static_cast<std::size_t>(n);
  }
  return Status::ok();
}

Result<std::string> draw_secret() {
  unsigned char bytes[32];
  if (auto s = random_bytes(bytes, sizeof bytes); !s) return Status(s.code(), "a secret: " + s.message());
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (unsigned char b : bytes) {
    s += hex[b >> 4];
    s += hex[b & 15];
  }
  return s;
}

} // namespace chorus
