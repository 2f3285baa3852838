// A TCP port free on this host now: where torch.distributed's store goes under chorus-run
// (MASTER_PORT). Rank 0 binds it as soon as it starts; as with torchrun's --master-port, another
// program may take it first, and a rank 0 on another host is given the same number.
#pragma once
#include <cstdint>

namespace chorus::launch {

// 0 when no port can be had.
uint16_t free_port();

} // namespace chorus::launch
