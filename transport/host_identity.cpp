#include "transport/host_identity.hpp"

#include <unistd.h>

#include <climits>
#include <fstream>

namespace chorus {

std::string host_key() {
  std::string key;
  auto add = [&](const char* what, std::string value) {
    while (!value.empty() && (value.back() == '\n' || value.back() == ' ')) value.pop_back();
    if (value.empty()) return;
    if (!key.empty()) key += ' ';
    key += std::string(what) + ":" + value;
  };
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  add("boot", boot);
  char ns[128];
  const ssize_t n = readlink("/proc/self/ns/net", ns, sizeof ns - 1);
  add("net", n > 0 ? std::string(ns, static_cast<std::size_t>(n)) : std::string());
  char name[HOST_NAME_MAX + 1] = {};
  add("name", gethostname(name, sizeof name - 1) == 0 ? std::string(name) : std::string());
  // Without a boot id a name alone could join two machines: then no key (a host of its own).
  return boot.empty() ? std::string() : key;
}

} // namespace chorus
