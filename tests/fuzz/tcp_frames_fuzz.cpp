// The data plane's frame parser on a plain TCP connection (transport/tcp/tcp_connection.cpp): the
// input is what the other node sends, through one end of a socket pair, then it closes; the
// connection on the other end pumps it into a sink, which must see what frame_check.hpp says.
#include "frame_check.hpp"
#include "transport/tcp/tcp_connection.hpp"

using namespace chorus;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size > (std::size_t{256} << 10)) return 0;  // fits the socket pair's buffer
  fuzz::SocketPair pair;
  pair.send(data, size);
  fuzz::RecordingSink sink;
  TcpConnection c(pair.theirs, 1, &sink);
  pair.theirs = -1;  // the connection's now
  fuzz::pump_and_compare(c, sink, data, size);
  return 0;
}
