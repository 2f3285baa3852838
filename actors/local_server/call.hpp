// A request to the local server: an op or group request (plain structs: they never leave the
// process) or the encoded control message, and what travels beside it: the caller's buffers
// (shared by reference, never copied) and the reply slot the local server fills directly, so a
// blocking peer thread wakes without going through the actor scheduler.
#pragma once
#include <chrono>
#include <functional>
#include <memory>

#include <chorus/status.hpp>
#include <chorus/tensor.hpp>
#include "actors/local_server/device_run.hpp"
#include "actors/local_server/nccl_run.hpp"
#include "actors/local_server/op_request.hpp"
#include "core/wait.hpp"
#include "messages/envelope.hpp"
#include "strategies/executor.hpp"
#include "strategies/tuning.hpp"

namespace chorus {

struct Reply {
  WaitWord done;                  // 1 once the fields below are set
  Status status;                  // the error; or ok, with a plan for ops
  std::shared_ptr<OpPlan> plan;   // the op to run, when ok (host tensors)
  std::shared_ptr<DeviceRun> device;  // or the op on GPU tensors
  std::shared_ptr<NcclRun> nccl;      // or, after the plan's announcements, NCCL across nodes
  bool copied = false;            // or nothing: a send/recv pair of host tensors, copied when paired
  int rank = -1;                  // the index this peer runs in the plan
  DType out_dtype = DType::f32;   // broadcast/scatter by data: what the receivers allocate
  Shape out_shape;
  uint64_t timer = 0;             // the server's timer for this request: on_timeout(timer) expires it
  uint64_t epoch = 0;             // register: the registration generation to send with every op
  uint32_t group = 0;             // new group: its id
  RunStrategy strategy;           // ops: what runs them (Peer::last_strategy)
  uint32_t source = 0;            // a receive: its sender, as the server numbers peers (recv_any's)
  // Called once the fields are set, beside `done`: a receive from any source across nodes waits
  // on its mailbox's word, not on `done`, and is woken so. Set before the call enters the server.
  std::function<void()> also_wake;

  void complete(Status s) {
    status = std::move(s);
    done.set(1);
    if (also_wake) also_wake();
  }
};

// One request to the local server and its in-process side-car.
struct Call {
  OpRequestData request;   // on_op
  GroupRequestData group;  // on_group
  Envelope message;        // the control messages (register, finish, reset)
  Tensor input;    // what the caller sends (may be undefined)
  Tensor output;   // where the caller receives (may be undefined: in place, or allocated later)
  std::shared_ptr<Reply> reply = std::make_shared<Reply>();
  // The caller could not take part (staging its GPU tensor failed): it still takes its place in
  // the op, so that sequence numbers stay aligned, and every peer of the op gets this error.
  Status local_error;
  // How long the caller waits for the others (OpOptions::timeout, else its Config's): across
  // nodes, the op waits for the other nodes as long as the shortest of its local peers' says; in
  // one process, the plan launched once all called ends by that shortest bound too.
  std::chrono::milliseconds timeout{0};
  // Whether `timeout` is the op's own (OpOptions::timeout), which across nodes goes to every node
  // of the op; a Config's stays its process's own.
  bool timeout_given = false;
};

} // namespace chorus
