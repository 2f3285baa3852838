// chorus-test-node's scenarios in which something goes wrong and every survivor must get the right
// error: peers that disagree (across nodes, within a node, on a group), an input that cannot be
// staged, a peer that stops calling, a node killed or frozen mid-op, a node killed while a peer
// waits for its node-mate.
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <mutex>
#include <thread>
#include <string>
#include <vector>

#include <chorus/gpu.hpp>
#include "actors/global_client/global_client.hpp"
#include "runtime/runtime_impl.hpp"
#include "multi_node_peer.hpp"
#include "test_events.hpp"

namespace chorus::test_node {

namespace {

// The victim node's peers pass one element more: every peer must get the same error.
int mismatch(Peer& p, const NodeContext& node) {
  const Args& a = node.args;
  const bool odd = p.rank() >= static_cast<uint32_t>(a.victim_node) &&
                   p.rank() < static_cast<uint32_t>(a.victim_node) + a.peers;
  Tensor x = make_input(DType::f32, p.rank(), odd ? 11 : 10, ReduceOp::sum);
  must(p.all_reduce(x, ReduceOp::sum));
  return 1;
}

// The victim rank's op cannot run on its node: it passes one element more than its node-mate
// (local-mismatch), or a GPU tensor that cannot be copied to the host, there being no such GPU
// (gpu-staging; gpu-staging-two: ranks 1 and the victim, on two nodes). Every peer of every node
// must get the same error, and the next op must line up and work.
int node_cannot_run(Peer& p, const NodeContext& node) {
  const Args& a = node.args;
  const bool victim = p.rank() == static_cast<uint32_t>(a.victim_node) ||
                      (a.scenario == "gpu-staging-two" && p.rank() == 1);
  Tensor x = make_input(DType::f32, p.rank(), victim && a.scenario == "local-mismatch" ? 11 : 10, ReduceOp::sum);
  if (victim && a.scenario != "local-mismatch")
    x = Tensor::borrow(reinterpret_cast<void*>(uintptr_t{0x7f0000001000}), DType::f32, {10},
                       Device::cuda(gpu::device_count() + 5));
  Status first = p.all_reduce(x, ReduceOp::sum);
  Tensor y = Tensor::from(std::vector<int32_t>{1});
  must(p.all_reduce(y, ReduceOp::sum));
  if (y.to_vector<int32_t>()[0] != static_cast<int32_t>(p.size()))
    throw Fail{Status(Errc::internal, "the op after the failed one gave a wrong sum")};
  must(first);
  return 2;
}

// Rank 0 sends rank 2 (another node) a GPU tensor it cannot stage: both get the same error at
// once, and the next send/recv of the pair works.
int p2p_staging(Peer& p, const NodeContext&) {
  if (p.rank() == 0 || p.rank() == 2) {
    Tensor host = Tensor::from(std::vector<float>(6, 1.f));
    Status first;
    if (p.rank() == 0) {
      first = p.send(Tensor::borrow(reinterpret_cast<void*>(uintptr_t{0x7f0000001000}), DType::f32, {6},
                                    Device::cuda(gpu::device_count() + 5)),
                     2);
      must(p.send(host, 2, 1));
    } else {
      first = p.recv(host, 0);
      Tensor again = Tensor::zeros(DType::f32, {6});
      must(p.recv(again, 0, 1));
      if (again.to_vector<float>() != std::vector<float>(6, 1.f))
        throw Fail{Status(Errc::internal, "the send after the failed one arrived wrong")};
    }
    must(first);
  }
  return 1;
}

// Peers 0 and 2 ask for {0, 1, 2}; peer 1 asks for {0, 1}: all three must fail.
int group_mismatch(Peer& p, const NodeContext&) {
  if (p.rank() <= 2) {
    std::vector<PeerId> m = p.rank() == 1 ? std::vector<PeerId>{0, 1} : std::vector<PeerId>{0, 1, 2};
    auto g = p.new_group(m);
    must(g.status());
  }
  return 1;
}

// The victim peer stops calling after --at-op ops; everyone else must time out, naming it (its
// own node's peers) or its node (the other nodes). Its node stays in the collective until every
// node is done (--exit-when-told), so the others see a silent peer, not a departed one.
int skip(Peer& p, const NodeContext& node) {
  const Args& a = node.args;
  int done = 0;
  for (uint32_t i = 0; i < a.at_op + 1; ++i, ++done) {
    if (i == a.at_op && p.rank() == static_cast<uint32_t>(a.victim_node)) throw Fail{Status(Errc::ok, "skipped")};
    Tensor x = make_input(DType::f32, p.rank(), 100, ReduceOp::sum);
    must(p.all_reduce(x, ReduceOp::sum));
  }
  return done;
}

// Ops run until, at op --at-op, the victim node dies (or freezes) while the others are inside it;
// with --freeze-after-ms, the victim freezes that long after entering the op itself (a thread of
// its own stops the whole process), in the middle of the op's transfers; with --freeze-when
// receiving, once its node is about to wait in the op for data, which it does only after it has
// sent its announcement of the op (GlobalClient's data-wait hook: an event, not a delay).
int kill_or_freeze(Peer& p, const NodeContext& node) {
  const Args& a = node.args;
  int done = 0;
  auto froze = std::make_shared<std::atomic<bool>>(false);  // once only: after SIGCONT the op's waits go on
  for (uint32_t i = 0;; ++i, ++done) {
    Tensor x = make_input(DType::f32, p.rank(), a.elements, ReduceOp::sum);
    const bool fault_here = i == a.at_op && p.rank() == static_cast<uint32_t>(a.victim_node);
    if (fault_here) {
      say("PEER " + std::to_string(p.rank()) + " VICTIM");
      if (a.scenario == "freeze" && a.freeze_when == "receiving") {
        // Stops the whole process on the op's own thread as it is about to wait for data in op
        // --at-op (its announcement has left by then): the freeze is an event inside the op.
        RuntimeAccess::impl(node.runtime).global->set_data_wait_hook([seq = uint64_t{a.at_op}, froze](uint32_t group, uint64_t s) {
          if (group == 0 && s == seq && !froze->exchange(true)) raise(SIGSTOP);
        });
      } else if (a.scenario == "freeze" && a.freeze_after_ms >= 0)
        std::thread([ms = a.freeze_after_ms] {
          std::this_thread::sleep_for(std::chrono::milliseconds(ms));  // the fault's moment, inside the op
          raise(SIGSTOP);
        }).detach();
      else
        raise(a.scenario == "kill" ? SIGKILL : SIGSTOP);
    }
    must(a.op == "broadcast" ? p.broadcast(x, 0) : p.all_reduce(x, ReduceOp::sum));
    if (fault_here && a.scenario == "freeze" && a.freeze_when == "receiving") {
      if (!froze->load()) say("FREEZE MISSED");  // the op ended here without ever waiting for data
      RuntimeAccess::impl(node.runtime).global->set_data_wait_hook({});
    }
    if (i > a.at_op + 1000) break;
  }
  return done;
}

// Node 0's peer A (rank 0) enters op --at-op while its node-mate B (rank 1) holds back, so A waits
// in its node's local phase; the victim node's peers stop before that op, and once every peer but A
// has said READY (B only once A's call is in the local server) the test kills the victim's process.
// A must hear of the loss at once: in the op it waits in, then in the next one, which it enters
// first. B then calls both ops, and the other nodes' peers call them at once: the same loss for all.
// Each survivor prints the next op's status as "PEER r NEXT code message" and the first error as
// its ERR line.
std::promise<void> a_done;  // A's two ops returned (A and B are threads of node 0's process)

int kill_while_waiting(Peer& p, const NodeContext& node) {
  const Args& a = node.args;
  const uint32_t me = p.rank(), victim = static_cast<uint32_t>(a.victim_node);
  const std::string line = "PEER " + std::to_string(me) + " ";
  for (uint32_t i = 0; i < a.at_op; ++i) {
    Tensor x = make_input(DType::f32, me, 1000, ReduceOp::sum);
    must(p.all_reduce(x, ReduceOp::sum));
  }
  if (me >= victim && me < victim + a.peers) {  // the victim: waits to be killed
    say(line + "READY");
    for (;;) pause();
  }
  const auto limit = std::chrono::milliseconds(2 * a.timeout_ms);
  if (me == 1) {
    // Until A's call is in this node's local server: looked at again after each op request the
    // server takes in, up to the limit.
    LocalServerCore& core = *RuntimeAccess::impl(node.runtime).core;
    const auto until = std::chrono::steady_clock::now() + limit;
    for (uint32_t seen = node.entered.count(); core.pending_ops() == 0; seen = node.entered.count()) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      if (left.count() <= 0 || !node.entered.wait_for(seen + 1, left))
        throw Fail{Status(Errc::internal, "peer 0's op never reached the local server")};
    }
    say(line + "READY");
    if (a_done.get_future().wait_for(limit) != std::future_status::ready)
      throw Fail{Status(Errc::internal, "peer 0 never returned")};
  } else if (me != 0) {
    say(line + "READY");
  }
  Tensor x = make_input(DType::f32, me, 1000, ReduceOp::sum);
  const Status first = p.all_reduce(x, ReduceOp::sum);
  const Status next = p.barrier();
  if (me == 0) a_done.set_value();
  say(line + "NEXT " + std::string(to_string(next.code())) + " " + next.message());
  must(first);
  must(next);
  return static_cast<int>(a.at_op) + 2;
}

} // namespace

// The victim peer holds back before op --at-op until a line comes on its node's stdin, while every
// other peer enters that op and waits (its node-mate in the local server, the other nodes for its
// node): the test asks the orchestrator where everyone stands meanwhile (chorus-ctl status), then
// lets the victim go, and every op completes.
bool read_line_from_stdin(std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (char c = 0; c != '\n';) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd pfd{STDIN_FILENO, POLLIN, 0};
    if (left.count() <= 0 || poll(&pfd, 1, static_cast<int>(left.count())) <= 0) return false;
    if (read(STDIN_FILENO, &c, 1) != 1) return false;  // the end: nobody will say go
  }
  return true;
}

int stall(Peer& p, const NodeContext& node) {
  const Args& a = node.args;
  for (uint32_t i = 0; i <= a.at_op; ++i) {
    if (i == a.at_op && p.rank() == static_cast<uint32_t>(a.victim_node)) {
      say("PEER " + std::to_string(p.rank()) + " HOLDING");
      if (!read_line_from_stdin(std::chrono::milliseconds(a.timeout_ms)))
        throw Fail{Status(Errc::internal, "was never told to go on")};
    }
    Tensor x = make_input(DType::f32, p.rank(), 100, ReduceOp::sum);
    must(p.all_reduce(x, ReduceOp::sum));
    std::string why;
    verify(check_reduced(x, DType::f32, ReduceOp::sum, p.size(), 100, 0, why), "all_reduce", why);
  }
  return static_cast<int>(a.at_op) + 1;
}

// One round of send/recv around the ring of the nodes' first peers (each sends to the next node's
// and receives from the one before's, so every pair crosses nodes; the others go on to the
// all-reduce), its message checked: the first failure, or ok. Within a node, pairs go on after a
// loss elsewhere (they need no other node): a peer that stopped at the fault would leave its
// neighbour's receive waiting out the op timeout.
Status ring_round(Peer& p, const NodeContext& node, std::size_t count, uint32_t round) {
  const GlobalClient& g = *RuntimeAccess::impl(node.runtime).global;
  const uint32_t total = g.total_peers(), nodes = g.node_of(total - 1) + 1;
  if (p.rank() != g.offset() || nodes < 2) return Status::ok();
  auto first_of = [&](uint32_t n) {
    uint32_t r = 0;
    while (g.node_of(r) != n) ++r;
    return r;
  };
  const uint32_t right = first_of((p.node() + 1) % nodes), left = first_of((p.node() + nodes - 1) % nodes);
  Tensor mine = make_input(DType::f32, p.rank(), count, ReduceOp::sum, round % 5);
  Tensor got = Tensor::zeros(DType::f32, {static_cast<int64_t>(count)});
  Work sent = p.send_async(mine, right, 1000 + round);
  const Status r = p.recv(got, left, 1000 + round);
  const Status s = sent.wait();
  if (!r.is_ok()) return r;
  if (!s.is_ok()) return s;
  const Tensor want = make_input(DType::f32, left, count, ReduceOp::sum, round % 5);
  verify(std::memcmp(got.data(), want.data(), want.nbytes()) == 0, "send/recv",
         "round " + std::to_string(round) + " took other data than rank " + std::to_string(left) + " sent");
  return Status::ok();
}

// The fault harness's load (fault_injection_test.cpp): all-reduces of sizes from 1 KiB to 1 MiB
// (the same for every peer, op by op), each result checked, every third one after a round of
// send/recv around the nodes (4 KiB that goes with its header, or 2 MiB that the receive pulls),
// until --ops are done or one fails; the harness kills or freezes a process, or breaks a data
// connection, from outside at a random moment. Each peer first says which node it is on, so that
// the harness knows whom it hits. After a failed op a peer calls one more (the all-reduce the
// other peers call next) and prints its status as "PEER r NEXT code message": what every later op
// reports once the node has heard of the fault. soak-collectives: the all-reduces alone (for a
// stalled link, which only the op timeout detects: a first peer held in a send/recv round for it
// would have its node's other peers time out on it in the all-reduce, naming that peer).
int soak_with(Peer& p, const NodeContext& node, bool p2p) {
  const std::string me = "PEER " + std::to_string(p.rank()) + " ";
  say(me + "ON NODE " + std::to_string(p.node()));
  static constexpr std::size_t kSizes[] = {256, 16384, 65536, 262144};  // f32 elements
  for (uint32_t i = 0; i < node.args.ops; ++i) {
    const std::size_t count = kSizes[(i * 7 + node.args.at_op) % 4];
    if (p2p && i % 3 == 2) {
      if (Status s = ring_round(p, node, (i / 3) % 2 ? 1024 : 524288, i); !s.is_ok()) {
        Tensor y = make_input(DType::f32, p.rank(), count, ReduceOp::sum, i % 5);
        const Status next = p.all_reduce(y, ReduceOp::sum);  // this round's, which the others call next
        say(me + "NEXT " + std::string(to_string(next.code())) + " " + next.message());
        must(s);
      }
    }
    Tensor x = make_input(DType::f32, p.rank(), count, ReduceOp::sum, i % 5);
    if (Status s = p.all_reduce(x, ReduceOp::sum); !s.is_ok()) {
      // The next op is the one the other nodes run next (a peer whose op timed out while theirs
      // completed then meets them in it, rather than in an op of its own that only mismatches).
      const std::size_t next_count = kSizes[((i + 1) * 7 + node.args.at_op) % 4];
      Tensor y = make_input(DType::f32, p.rank(), next_count, ReduceOp::sum, (i + 1) % 5);
      const Status next = p.all_reduce(y, ReduceOp::sum);
      say(me + "NEXT " + std::string(to_string(next.code())) + " " + next.message());
      must(s);
    }
    std::string why;
    verify(check_reduced(x, DType::f32, ReduceOp::sum, p.size(), count, i % 5, why), "all_reduce", why);
  }
  return static_cast<int>(node.args.ops);
}
int soak(Peer& p, const NodeContext& node) { return soak_with(p, node, true); }
int soak_collectives(Peer& p, const NodeContext& node) { return soak_with(p, node, false); }

// skip inside a group: ranks 1-5 make a group (rank 0 stays out, and so the group's ranks are the
// global ones less one), and the victim (a global rank) stops calling the group's ops after --at-op.
int skip_in_group(Peer& p, const NodeContext& node) {
  const Args& a = node.args;
  if (p.rank() == 0) return 0;
  auto g = p.new_group({1, 2, 3, 4, 5});
  must(g.status());
  int done = 0;
  for (uint32_t i = 0; i < a.at_op + 1; ++i, ++done) {
    if (i == a.at_op && p.rank() == static_cast<uint32_t>(a.victim_node)) throw Fail{Status(Errc::ok, "skipped")};
    Tensor x = make_input(DType::f32, p.rank(), 100, ReduceOp::sum);
    must(g->all_reduce(x, ReduceOp::sum));
  }
  return done;
}

// Whether p is a node-mate of the victim (--victim, a rank here), not the victim itself.
bool victims_mate(const Peer& p, const Args& a) {
  const uint32_t victim = static_cast<uint32_t>(a.victim_node), first = victim - victim % a.peers;
  return p.rank() != victim && p.rank() >= first && p.rank() < first + a.peers;
}

// skip, where the victim's node-mates give op --at-op a tenth of the timeout: their node's
// local phase times out long before the other nodes' deadline, which its note then ends at once.
int skip_mates_brief(Peer& p, const NodeContext& node) {
  const Args& a = node.args;
  const uint32_t victim = static_cast<uint32_t>(a.victim_node);
  const bool mate = victims_mate(p, a);
  int done = 0;
  for (uint32_t i = 0; i < a.at_op + 1; ++i, ++done) {
    if (i == a.at_op && p.rank() == victim) throw Fail{Status(Errc::ok, "skipped")};
    Tensor x = make_input(DType::f32, p.rank(), 100, ReduceOp::sum);
    OpOptions o;
    if (i == a.at_op && mate) o.timeout = std::chrono::milliseconds(a.timeout_ms / 10);
    must(p.all_reduce_async(x, ReduceOp::sum, o).wait());
  }
  return done;
}

// skip-mates-brief, where the victim calls op --at-op late (once a node-mate's op failed: it gets
// that failure) and every peer then runs one more all-reduce, which must succeed: the op that
// timed out is in no node's table of ops in flight (where other nodes' frames had put it on the
// victim's node), so that an op never launched here leaves nothing behind.
int late_after_local_timeout(Peer& p, const NodeContext& node) {
  const Args& a = node.args;
  const uint32_t victim = static_cast<uint32_t>(a.victim_node);
  const bool mate = victims_mate(p, a);
  static std::mutex mu;  // the victim waits for its mate's failure (threads of one process)
  static std::condition_variable cv;
  static bool mate_failed = false;
  const std::string expected = "all_reduce #" + std::to_string(a.at_op) + ": rank " + std::to_string(victim) +
                               " never called within the op's timeout";
  for (uint32_t i = 0; i < a.at_op + 2; ++i) {
    Tensor x = make_input(DType::f32, p.rank(), 100, ReduceOp::sum, i);
    if (i != a.at_op) {
      must(p.all_reduce(x, ReduceOp::sum));
      std::string why;
      verify(check_reduced(x, DType::f32, ReduceOp::sum, p.size(), 100, i, why), "all_reduce", why);
      continue;
    }
    if (p.rank() == victim) {
      std::unique_lock<std::mutex> lk(mu);
      verify(cv.wait_for(lk, std::chrono::milliseconds(a.timeout_ms), [] { return mate_failed; }), "late call",
             "its node-mate's op never failed");
    }
    OpOptions o;
    if (mate) o.timeout = std::chrono::milliseconds(a.timeout_ms / 10);
    const Status s = p.all_reduce_async(x, ReduceOp::sum, o).wait();
    verify(s.code() == Errc::timeout && s.message() == expected, "all_reduce #" + std::to_string(i),
           "got '" + s.message() + "', not '" + expected + "'");
    if (mate) {
      std::lock_guard<std::mutex> lk(mu);
      mate_failed = true;
      cv.notify_all();
    }
  }
  const GlobalClient& g = *RuntimeAccess::impl(node.runtime).global;
  verify(!g.holds(0, a.at_op), "the op table", "all_reduce #" + std::to_string(a.at_op) + " is still in it");
  return static_cast<int>(a.at_op + 2);
}

Scenario fault_scenario(const std::string& name) {
  if (name == "mismatch") return mismatch;
  if (name == "local-mismatch" || name == "gpu-staging" || name == "gpu-staging-two") return node_cannot_run;
  if (name == "p2p-staging") return p2p_staging;
  if (name == "group-mismatch") return group_mismatch;
  if (name == "skip") return skip;
  if (name == "skip-in-group") return skip_in_group;
  if (name == "skip-mates-brief") return skip_mates_brief;
  if (name == "late-after-local-timeout") return late_after_local_timeout;
  if (name == "stall") return stall;
  if (name == "soak") return soak;
  if (name == "soak-collectives") return soak_collectives;
  if (name == "kill" || name == "freeze") return kill_or_freeze;
  if (name == "kill-while-waiting") return kill_while_waiting;
  return nullptr;
}

} // namespace chorus::test_node
