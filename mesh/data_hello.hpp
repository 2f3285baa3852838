// The hello each side of a new data connection sends first (messages/data_codec.hpp: DataHello):
// it proves the connection belongs to this collective (its id and token) and names the node.
#pragma once
#include <cstdint>

#include <chorus/status.hpp>
#include "messages/node_codec.hpp"
#include "transport/tls/tls_channel.hpp"

namespace chorus {

// Sends this node's hello (inside the TLS session when there is one).
Status send_hello(int fd, TlsChannel* tls, const TopologyData& t, Clock::time_point deadline);
// Reads one hello frame and checks it belongs to this collective; `node`: the sender's id.
Status read_hello(int fd, TlsChannel* tls, const TopologyData& t, Clock::time_point deadline, uint32_t& node);

} // namespace chorus
