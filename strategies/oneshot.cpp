// One-shot all-reduce for peers that each live in their own process (one peer per node): every
// peer sends its whole buffer to every other in round 0 and reduces every other's buffer into its
// own in round 1: one network latency instead of the two of a tree or ring, for small buffers.
//
// It relies on a send being finished with the sender's memory at the end of its round (a network
// send hands the bytes to the connection; wait_sent returns once they are on it), so round 1 may
// overwrite what round 0 sent. Between peers of one process a send lends its memory until the
// receiver has read it, which happens only in round 1: there this schedule would wait until the
// deadline, so it is never chosen there (see Config::global_strategy), nor can a user name it.
//
// Results are bit-identical on both peers only where the reduce op commutes bitwise, which holds
// for two peers (x0 + x1 == x1 + x0 in IEEE arithmetic, also for prod, bitwise ops and integer
// min/max) except for which NaN's payload survives when both operands are NaN (as with the host
// kernels, which may commute operands); float min/max of -0 and +0 differ by order, so one-shot is
// used for two peers and integer or sum/prod/avg reductions only.
#include "strategies/schedule_builders.hpp"

#include <stdexcept>

namespace chorus::detail {

std::vector<Program> oneshot_schedule(const ScheduleParams& p) {
  if (p.op != OpKind::all_reduce) throw std::invalid_argument("make_schedule: oneshot is for all_reduce only");
  const int n = p.n;
  std::vector<Program> programs(static_cast<std::size_t>(n));
  if (p.count == 0) return programs;
  for (int me = 0; me < n; ++me) {
    Round sends, receives;
    for (int k = 1; k < n; ++k) sends.steps.push_back(Step{StepKind::send, (me + k) % n, 0, p.count});
    for (int q = 0; q < n; ++q)
      if (q != me) receives.steps.push_back(Step{StepKind::recv_reduce, q, 0, p.count});
    if (n > 1) {
      programs[me].push_back(std::move(sends));
      programs[me].push_back(std::move(receives));
    }
  }
  return programs;
}

} // namespace chorus::detail
