// The front door's BASP guard (actors/orchestrator/basp_guard.cpp) against any bytes, on both of
// its sides: the input is cut into pieces (sizes from its own bytes), each given to check() (what
// a client sends) or observe() (what the orchestrator sends). The guard reads nothing out of
// bounds, and once it refuses it refuses everything after.
#include <cstdint>
#include <string>

#include "actors/orchestrator/basp_guard.hpp"
#include "fuzz_kit.hpp"

using namespace chorus;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  BaspServer server;
  server.node = std::string("\x00\x00\x00\x00\x00\x00\x00\x01", 8) + std::string(24, 'o');
  server.actor = 9;
  server.info_request = std::string(1, '\0') + "info";
  BaspGuard guard(server, 4096);
  std::string refused;
  std::size_t at = 0;
  while (at < size) {
    const uint8_t control = data[at++];
    const std::size_t piece = std::min<std::size_t>(size - at, 1 + control % 64);
    const char* p = reinterpret_cast<const char*>(data + at);
    if (control & 0x80) {
      guard.observe(p, piece);
    } else {
      const std::string why = guard.check(p, piece);
      FUZZ_CHECK(refused.empty() || why == refused, "a refusal was taken back");
      if (refused.empty()) refused = why;
    }
    at += piece;
  }
  return 0;
}
