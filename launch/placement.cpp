#include "launch/placement.hpp"

#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <map>

namespace chorus::launch {

namespace {

Status bad_hosts(std::string_view entry, const std::string& why) {
  return Status(Errc::invalid_argument, "bad --hosts entry '" + std::string(entry) + "': " + why);
}

} // namespace

Result<std::vector<HostSlots>> parse_hosts(std::string_view text) {
  std::vector<HostSlots> hosts;
  if (text.empty()) return Status(Errc::invalid_argument, "--hosts is empty");
  std::size_t from = 0;
  while (from <= text.size()) {
    const std::size_t comma = std::min(text.find(',', from), text.size());
    const std::string_view entry = text.substr(from, comma - from);
    from = comma + 1;
    HostSlots h;
    const std::size_t colon = entry.rfind(':');
    h.name = std::string(entry.substr(0, colon));
    if (colon != std::string_view::npos) {
      const std::string_view digits = entry.substr(colon + 1);
      const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), h.slots);
      if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || h.slots == 0)
        return bad_hosts(entry, "slots are a whole number, at least 1");
    }
    if (h.name.empty()) return bad_hosts(entry, "no host name");
    // ssh would read a name starting with '-' as one of its options.
    if (h.name.front() == '-') return bad_hosts(entry, "a host name does not start with '-'");
    if (h.name.find_first_of(" \t\n'\"\\") != std::string::npos) return bad_hosts(entry, "blanks or quotes in the name");
    hosts.push_back(std::move(h));
  }
  return hosts;
}

std::string this_hostname() {
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "";
  return name;
}

bool is_local_host(std::string_view host, std::string_view hostname) {
  if (host == "localhost" || host == "127.0.0.1") return true;
  if (hostname.empty()) return false;
  return host == hostname || host == hostname.substr(0, hostname.find('.'));
}

Result<std::vector<RankPlace>> place_ranks(const std::vector<HostSlots>& hosts, uint32_t n, std::string_view hostname) {
  std::vector<RankPlace> places;
  if (hosts.empty()) {
    for (uint32_t r = 0; r < n; ++r) places.push_back({r, "localhost", true, r, n});
    return places;
  }
  uint64_t slots = 0;
  for (const auto& h : hosts) slots += h.slots;
  if (slots < n)
    return Status(Errc::invalid_argument, "--hosts has " + std::to_string(slots) + " slot" + (slots == 1 ? "" : "s") +
                                              " for " + std::to_string(n) + " processes");
  // The machine a rank runs on: "" for this one, whatever name it was given; else the host's name.
  std::map<std::string, uint32_t> on_machine;
  std::vector<std::string> machine_of;
  for (const auto& h : hosts) {
    for (uint32_t s = 0; s < h.slots && places.size() < n; ++s) {
      RankPlace p;
      p.rank = static_cast<uint32_t>(places.size());
      p.host = h.name;
      p.local = is_local_host(h.name, hostname);
      const std::string machine = p.local ? "" : h.name;
      p.local_rank = on_machine[machine]++;
      places.push_back(std::move(p));
      machine_of.push_back(machine);
    }
  }
  for (std::size_t r = 0; r < places.size(); ++r) places[r].local_world_size = on_machine[machine_of[r]];
  return places;
}

} // namespace chorus::launch
