// Where each process of a job runs: --hosts read into hosts and their slots, the ranks laid on
// them in order, and which hosts are this machine (started directly rather than through ssh).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <chorus/result.hpp>

namespace chorus::launch {

struct HostSlots {
  std::string name;
  uint32_t slots = 1;  // processes it takes at most
};
// "h1:2,h2,h3:4": h1 with 2 slots, h2 with 1, h3 with 4. The error names the bad entry.
Result<std::vector<HostSlots>> parse_hosts(std::string_view text);

// This machine's name, as gethostname() gives it ("" when it cannot be read).
std::string this_hostname();
// Whether `host` is this machine: localhost, 127.0.0.1, `hostname` or its first label (a short
// name given where gethostname() says node1.example.org).
bool is_local_host(std::string_view host, std::string_view hostname);

struct RankPlace {
  uint32_t rank = 0;
  std::string host;             // as --hosts names it ("localhost" without --hosts)
  bool local = true;            // this machine: started directly, not through ssh
  uint32_t local_rank = 0;      // its index among the processes of its host
  uint32_t local_world_size = 0;  // the processes of its host
};
// Ranks 0..n-1: the first hosts[0].slots on hosts[0], the next hosts[1].slots on hosts[1], ...;
// every rank on this machine when `hosts` is empty. Names of this machine (localhost, 127.0.0.1,
// its hostname) count as one host for the local ranks, since they share it. The error says when
// the slots are fewer than n.
Result<std::vector<RankPlace>> place_ranks(const std::vector<HostSlots>& hosts, uint32_t n,
                                           std::string_view hostname);

} // namespace chorus::launch
