// Whether a connection accepted on a loopback listener was opened by this very process. A door's
// client (transport/door_passage.hpp) hands CAF a loopback port that leads through an
// authenticated connection to the orchestrator: another local user who connected to that port
// first would ride on this process's authentication. The check: one of this process's own
// sockets has the accepted connection's far end as its near end, and our end as its far end.
#pragma once

namespace chorus {

bool opened_by_this_process(int accepted_fd);

} // namespace chorus
