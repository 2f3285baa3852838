// Which host this process runs on, as the orchestrator groups nodes: processes with the same key
// share memory (one kernel, seen through one network namespace), so their data connections may go
// through shared memory (transport/shm/). Nodes in different network namespaces count as different
// hosts, as they would be reached through the network anyway.
#pragma once
#include <string>

namespace chorus {

// "boot:<kernel boot id> net:<network namespace inode> name:<host name>"; parts that cannot be read
// are left out, and "" when none can (a host of its own).
std::string host_key();

} // namespace chorus
