// The mesh of data connections between the nodes of a collective: this node's data listener, and
// one Connection (transport/connection.hpp) to every other node, each opened by the higher id,
// authenticated by TLS when the configuration has TLS files, and proved to belong to this
// collective by a hello each way (messages/data_codec.hpp: DataHello). Between two nodes of one
// host (and unless Config::host_transport says network) the bytes then go through shared memory
// (transport/shm/), the socket staying as the pair's wake-up and liveness channel. A shrink or
// grow keeps the links between members (Connection::rehome) and connects only the new pairs.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <chorus/config.hpp>
#include <chorus/result.hpp>
#include "messages/node_codec.hpp"
#include "transport/connection.hpp"

namespace chorus {

// A listening socket for the other nodes' data connections (closed with the object).
class DataListener {
 public:
  // On config.node_address ("host" or "host:port"; port 0 or none picks a free one).
  static Result<std::unique_ptr<DataListener>> open(const std::string& node_address);
  ~DataListener();
  DataListener(const DataListener&) = delete;
  DataListener& operator=(const DataListener&) = delete;
  int fd() const { return fd_; }
  // "host:port" as the other nodes reach it (the topology's data_address).
  const std::string& address() const { return address_; }

 private:
  DataListener() = default;
  int fd_ = -1;
  std::string address_;
};

// Connects this node (topo.node_id) to every other node before config.timeout, turning strangers
// away. conns: by node id, null for this node; it comes in holding the links kept from the epoch
// before (null where there is none: only those pairs are connected) and leaves complete. Every new
// connection delivers its frames to `sink`, stamped as topo.epoch's (FrameHeader::magic_of).
Status connect_mesh(const Config& config, const TopologyData& topo, const DataListener& listener, FrameSink* sink,
                    Clock::time_point deadline, std::vector<std::shared_ptr<Connection>>& conns);
// How many data connections connect_mesh has made in this process (a test's check that a shrink
// kept the members' links).
uint64_t mesh_links_made();

} // namespace chorus
