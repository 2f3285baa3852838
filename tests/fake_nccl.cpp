#include "fake_nccl.hpp"

#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <optional>

#include "strategies/reduce_kernels.hpp"

namespace chorus::fake {

using namespace gpu;

namespace {

thread_local int t_device = -1;
thread_local const FakeNccl* t_owner = nullptr;
thread_local bool t_no_gpus = false;  // NoGpusOnThisThread

constexpr uint64_t kNever = UINT64_MAX;  // the sequence number of a held rank's collective

enum Kind { k_all_reduce, k_reduce, k_broadcast, k_all_gather, k_reduce_scatter };

const char* red_name(int op) {
  static const char* const names[] = {"sum", "prod", "min", "max", "avg"};
  return op >= 0 ? names[op] : "-";
}
ReduceOp host_op(int op) {
  switch (static_cast<NcclRedOp>(op)) {
    case NcclRedOp::prod: return ReduceOp::prod;
    case NcclRedOp::min: return ReduceOp::min;
    case NcclRedOp::max: return ReduceOp::max;
    default: return ReduceOp::sum;  // avg: a sum, divided below
  }
}

uint64_t id_number(const NcclId& id) {
  uint64_t n = 0;
  std::memcpy(&n, id.data(), sizeof n);
  return n;
}

} // namespace

struct FakeFabric::Comm {
  struct Slot {
    int kind = 0;
    std::size_t count = 0;
    DType t = DType::f32;
    int op = -1, root = -1;
    std::vector<const void*> in;
    std::vector<void*> out;
    int arrived = 0;
    bool done = false;
  };
  std::mutex mu;
  uint64_t id = 0;
  int nranks = 0;
  int joined = 0;
  std::map<uint64_t, Slot> slots;
  std::map<std::pair<int, int>, std::deque<std::vector<unsigned char>>> wires;  // (from, to)
  std::string error;  // ranks that disagreed: what NCCL would hang on or garble

  // Runs a collective every rank has entered (under mu).
  void run(Slot& s) {
    const int n = nranks;
    const std::size_t b = s.count * dtype_size(s.t);
    const std::size_t in_bytes = s.kind == k_reduce_scatter ? b * n : b;
    std::vector<std::vector<unsigned char>> copy(n);  // inputs first: an output may be an input
    for (int r = 0; r < n; ++r)
      if (s.in[r]) copy[r].assign(static_cast<const unsigned char*>(s.in[r]),
                                  static_cast<const unsigned char*>(s.in[r]) + in_bytes);
    auto reduce_into = [&](void* dst, std::size_t offset) {
      std::vector<const void*> srcs;
      for (int r = 0; r < n; ++r) srcs.push_back(copy[r].data() + offset);
      reduce_n(s.t, host_op(s.op), dst, srcs.data(), srcs.size(), s.count);
      if (static_cast<NcclRedOp>(s.op) == NcclRedOp::avg) divide_by(s.t, dst, s.count, n);
    };
    for (int r = 0; r < n; ++r) {
      if (!s.out[r]) continue;
      auto* out = static_cast<unsigned char*>(s.out[r]);
      switch (s.kind) {
        case k_all_reduce: reduce_into(out, 0); break;
        case k_reduce:
          if (r == s.root) reduce_into(out, 0);
          break;
        case k_broadcast: std::memcpy(out, copy[s.root].data(), b); break;
        case k_all_gather:
          for (int k = 0; k < n; ++k) std::memcpy(out + k * b, copy[k].data(), b);
          break;
        case k_reduce_scatter: reduce_into(out, r * b); break;
      }
    }
    s.done = true;
  }
};

FakeFabric::FakeFabric() = default;
FakeFabric::~FakeFabric() = default;

uint64_t FakeFabric::new_id() {
  std::lock_guard<std::mutex> lk(mu_);
  return ++next_id_;
}

std::shared_ptr<FakeFabric::Comm> FakeFabric::join(uint64_t id, int nranks, std::string& error) {
  std::lock_guard<std::mutex> lk(mu_);
  if (id == 0 || id > next_id_) {
    error = "unique id #" + std::to_string(id) + " was never made";
    return nullptr;
  }
  for (auto& [known, weak] : comms_)
    if (known == id)
      if (auto c = weak.lock()) {
        if (c->nranks != nranks) {
          error = "nranks " + std::to_string(nranks) + " where the first rank said " + std::to_string(c->nranks);
          return nullptr;
        }
        return c;
      }
  auto c = std::make_shared<Comm>();
  c->id = id;
  c->nranks = nranks;
  comms_.emplace_back(id, c);
  return c;
}

void FakeFabric::note(std::string line) {
  std::lock_guard<std::mutex> lk(mu_);
  log_.push_back(std::move(line));
}

std::vector<std::string> FakeFabric::log() const {
  std::lock_guard<std::mutex> lk(mu_);
  return log_;
}

std::size_t FakeFabric::count(const std::vector<std::string>& parts) const {
  std::lock_guard<std::mutex> lk(mu_);
  std::size_t n = 0;
  for (const auto& l : log_) {
    bool all = true;
    for (const auto& p : parts) all = all && l.find(p) != std::string::npos;
    n += all;
  }
  return n;
}

void FakeFabric::clear_log() {
  std::lock_guard<std::mutex> lk(mu_);
  log_.clear();
}

struct FakeNccl::Rank {
  std::shared_ptr<FakeFabric::Comm> comm;
  int rank = 0, nranks = 0, device = 0;
  uint64_t next_seq = 0;  // collectives entered (only on the device's thread)
  std::atomic<bool> aborted{false};
};

// What a stream still owes, in order: a collective to complete, a receive to match, a division to
// run once everything before it is done.
struct Pending {
  enum { collective, receive, division } what;
  FakeNccl::Rank* rank = nullptr;
  uint64_t seq = 0;
  void* buf = nullptr;
  std::size_t bytes = 0;
  int peer = 0;
  DType t = DType::f32;
  std::size_t count = 0, divisor = 1;
};

struct FakeNccl::Lane {
  explicit Lane(uint32_t node, int d) : device(d), queue("node " + std::to_string(node) + " cuda:" + std::to_string(d)) {}
  int device;
  TaskQueue queue;
  std::vector<Pending> stream;  // only on the lane's thread
  std::atomic<bool> stop{false};
  std::thread thread;
};

FakeNccl::FakeNccl(FakeFabric& fabric, uint32_t node, int devices) : fabric_(fabric), node_(node) {
  for (int d = 0; d < devices; ++d) {
    lanes_.push_back(std::make_unique<Lane>(node, d));
    Lane* l = lanes_.back().get();
    l->thread = std::thread([this, l] {
      t_device = l->device;
      t_owner = this;
      while (!l->stop) l->queue.serve_one(Clock::now() + std::chrono::milliseconds(20), [](const TaskQueue::Task& t) {
        return t();
      });
    });
  }
}

FakeNccl::~FakeNccl() {
  for (auto& l : lanes_) l->stop = true;
  for (auto& l : lanes_) l->thread.join();
}

int FakeNccl::device_count() { return t_no_gpus ? 0 : static_cast<int>(lanes_.size()); }

FakeNccl::Lane& FakeNccl::lane(int device) { return *lanes_.at(static_cast<std::size_t>(device)); }

std::string FakeNccl::where(int device) {
  const std::string w = "node " + std::to_string(node_) + " cuda:" + std::to_string(device) + " ";
  if (t_owner != this || t_device != device) fabric_.note("VIOLATION: " + w + "called off its device's thread");
  return w;
}

TaskQueue::Ticket FakeNccl::submit(int device, TaskQueue::Task task) { return lane(device).queue.submit(std::move(task)); }

Status FakeNccl::wait(int device, const TaskQueue::Ticket& t, Clock::time_point deadline, const std::string& what,
                      bool abandon) {
  return lane(device).queue.wait(t, deadline, what, abandon);
}

Status FakeNccl::unique_id(NcclId& id) {
  const uint64_t n = fabric_.new_id();
  id.fill(0xab);
  std::memcpy(id.data(), &n, sizeof n);
  fabric_.note("node " + std::to_string(node_) + " ncclGetUniqueId #" + std::to_string(n));
  return Status::ok();
}

Stream FakeNccl::stream(int device) {
  where(device);
  return &lane(device);
}

NcclState FakeNccl::init_rank(NcclComm& comm, int nranks, const NcclId& id, int rank) {
  const uint64_t n = id_number(id);
  fabric_.note(where(t_device) + "ncclCommInitRankConfig rank " + std::to_string(rank) + "/" + std::to_string(nranks) +
               " id #" + std::to_string(n));
  comm = nullptr;
  std::string error;
  auto c = fabric_.join(n, nranks, error);
  if (!c) return NcclState::fail("invalid argument: " + error);
  auto r = std::make_unique<Rank>();
  r->comm = c;
  r->rank = rank;
  r->nranks = nranks;
  r->device = t_device;
  {
    std::lock_guard<std::mutex> lk(c->mu);
    ++c->joined;
  }
  comm = r.get();
  std::lock_guard<std::mutex> lk(ranks_mu_);
  ranks_.push_back(std::move(r));
  return {NcclState::in_progress, {}};
}

NcclState FakeNccl::state(NcclComm comm) {
  auto* r = static_cast<Rank*>(comm);
  if (r->aborted) return NcclState::fail("communicator aborted");
  std::lock_guard<std::mutex> lk(r->comm->mu);
  if (!r->comm->error.empty()) return NcclState::fail(r->comm->error);
  if (r->comm->joined < r->nranks) return {NcclState::in_progress, {}};
  return {};
}

void FakeNccl::abort(NcclComm comm) {
  auto* r = static_cast<Rank*>(comm);
  fabric_.note(where(r->device) + "ncclCommAbort rank " + std::to_string(r->rank) + "/" + std::to_string(r->nranks) +
               " id #" + std::to_string(r->comm->id));
  r->aborted = true;
}

NcclState FakeNccl::collective(const char* name, int kind, const void* in, void* out, std::size_t count, DType t,
                               int op, int root, NcclComm comm, Stream s) {
  auto* r = static_cast<Rank*>(comm);
  fabric_.note(where(r->device) + name + " rank " + std::to_string(r->rank) + "/" + std::to_string(r->nranks) +
               " count " + std::to_string(count) + " " + std::string(to_string(t)) + " " + red_name(op) +
               (root >= 0 ? " root " + std::to_string(root) : ""));
  if (r->aborted) return NcclState::fail("communicator aborted");
  if (r->device == held_) {  // never arrives: its stream waits for a collective that never runs
    static_cast<Lane*>(s)->stream.push_back({Pending::collective, r, kNever});
    return {};
  }
  const uint64_t seq = r->next_seq++;
  auto& c = *r->comm;
  {
    std::lock_guard<std::mutex> lk(c.mu);
    auto [it, fresh] = c.slots.try_emplace(seq);
    auto& slot = it->second;
    if (fresh) {
      slot.kind = kind, slot.count = count, slot.t = t, slot.op = op, slot.root = root;
      slot.in.assign(c.nranks, nullptr);
      slot.out.assign(c.nranks, nullptr);
    } else if (slot.kind != kind || slot.count != count || slot.t != t || slot.op != op || slot.root != root) {
      c.error = "rank " + std::to_string(r->rank) + " called " + name + " (count " + std::to_string(count) +
                ") as collective #" + std::to_string(seq) + ", where another rank called another";
    }
    slot.in[r->rank] = in;
    slot.out[r->rank] = out;
    if (++slot.arrived == c.nranks && c.error.empty()) c.run(slot);
  }
  static_cast<Lane*>(s)->stream.push_back({Pending::collective, r, seq});
  return {};
}

NcclState FakeNccl::all_reduce(const void* in, void* out, std::size_t count, DType t, NcclRedOp op, NcclComm comm,
                               Stream s) {
  return collective("ncclAllReduce", k_all_reduce, in, out, count, t, static_cast<int>(op), -1, comm, s);
}
NcclState FakeNccl::reduce(const void* in, void* out, std::size_t count, DType t, NcclRedOp op, int root,
                           NcclComm comm, Stream s) {
  return collective("ncclReduce", k_reduce, in, out, count, t, static_cast<int>(op), root, comm, s);
}
NcclState FakeNccl::broadcast(const void* in, void* out, std::size_t count, DType t, int root, NcclComm comm,
                              Stream s) {
  return collective("ncclBroadcast", k_broadcast, in, out, count, t, -1, root, comm, s);
}
NcclState FakeNccl::all_gather(const void* in, void* out, std::size_t count, DType t, NcclComm comm, Stream s) {
  return collective("ncclAllGather", k_all_gather, in, out, count, t, -1, -1, comm, s);
}
NcclState FakeNccl::reduce_scatter(const void* in, void* out, std::size_t count, DType t, NcclRedOp op,
                                   NcclComm comm, Stream s) {
  return collective("ncclReduceScatter", k_reduce_scatter, in, out, count, t, static_cast<int>(op), -1, comm, s);
}

NcclState FakeNccl::send(const void* buf, std::size_t count, DType t, int peer, NcclComm comm, Stream) {
  auto* r = static_cast<Rank*>(comm);
  fabric_.note(where(r->device) + "ncclSend rank " + std::to_string(r->rank) + " -> " + std::to_string(peer) +
               " count " + std::to_string(count) + " " + std::string(to_string(t)));
  if (r->aborted) return NcclState::fail("communicator aborted");
  const auto* p = static_cast<const unsigned char*>(buf);
  std::lock_guard<std::mutex> lk(r->comm->mu);
  r->comm->wires[{r->rank, peer}].emplace_back(p, p + count * dtype_size(t));
  return {};
}

NcclState FakeNccl::recv(void* buf, std::size_t count, DType t, int peer, NcclComm comm, Stream s) {
  auto* r = static_cast<Rank*>(comm);
  fabric_.note(where(r->device) + "ncclRecv rank " + std::to_string(r->rank) + " <- " + std::to_string(peer) +
               " count " + std::to_string(count) + " " + std::string(to_string(t)));
  if (r->aborted) return NcclState::fail("communicator aborted");
  Pending p{Pending::receive, r};
  p.buf = buf;
  p.bytes = count * dtype_size(t);
  p.peer = peer;
  static_cast<Lane*>(s)->stream.push_back(p);
  return {};
}

NcclState FakeNccl::group_start() {
  fabric_.note(where(t_device) + "ncclGroupStart");
  return {};
}
NcclState FakeNccl::group_end() {
  fabric_.note(where(t_device) + "ncclGroupEnd");
  return {};
}

Status FakeNccl::copy(void* dst, const void* src, std::size_t bytes, Stream s) {
  fabric_.note(where(static_cast<Lane*>(s)->device) + "cudaMemcpyAsync " + std::to_string(bytes) + " bytes");
  std::memmove(dst, src, bytes);
  return Status::ok();
}

Status FakeNccl::divide(DType t, void* buf, std::size_t count, std::size_t divisor, Stream s) {
  fabric_.note(where(static_cast<Lane*>(s)->device) + "divide count " + std::to_string(count) + " by " +
               std::to_string(divisor));
  Pending p{Pending::division};
  p.buf = buf;
  p.t = t;
  p.count = count;
  p.divisor = divisor;
  static_cast<Lane*>(s)->stream.push_back(p);
  return Status::ok();
}

Status FakeNccl::synchronize(int device, Clock::time_point deadline, const std::function<Status()>& watch) {
  where(device);
  auto& stream = lane(device).stream;
  // Settles what it can, in order: ok once nothing is owed, nullopt while something is, or the error.
  auto drain = [&]() -> std::optional<Status> {
    while (!stream.empty()) {
      Pending& p = stream.front();
      if (p.what == Pending::division) {
        divide_by(p.t, p.buf, p.count, p.divisor);
      } else {
        auto& c = *p.rank->comm;
        std::lock_guard<std::mutex> lk(c.mu);
        if (!c.error.empty()) return Status{Errc::device_error, "fake NCCL: " + c.error};
        if (p.what == Pending::collective) {
          if (!c.slots[p.seq].done) return std::nullopt;
        } else {
          auto& wire = c.wires[{p.peer, p.rank->rank}];
          if (wire.empty()) return std::nullopt;
          if (wire.front().size() != p.bytes)
            return Status{Errc::device_error, "fake NCCL: a receive of " + std::to_string(p.bytes) + " bytes met a send of " +
                                            std::to_string(wire.front().size())};
          std::memcpy(p.buf, wire.front().data(), p.bytes);
          wire.pop_front();
        }
      }
      stream.erase(stream.begin());
    }
    return Status::ok();
  };
  for (;;) {
    if (std::optional<Status> d = drain()) {
      stream.clear();
      return *d;
    }
    if (Status w = watch ? watch() : Status::ok(); !w.is_ok()) {
      stream.clear();
      return w;
    }
    if (Clock::now() >= deadline) {
      stream.clear();
      return {Errc::timeout, "the GPU's stream did not drain in time"};
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

NoGpusOnThisThread::NoGpusOnThisThread() : before_(t_no_gpus) { t_no_gpus = true; }
NoGpusOnThisThread::~NoGpusOnThisThread() { t_no_gpus = before_; }

HostMemoryAsGpus::HostMemoryAsGpus() : before_(&device_memory()) { install_device_memory(this); }
HostMemoryAsGpus::~HostMemoryAsGpus() { install_device_memory(before_); }

Status HostMemoryAsGpus::allocate(int, std::size_t bytes, void** out) {
  *out = std::calloc(bytes ? bytes : 1, 1);
  return *out ? Status::ok() : Status(Errc::device_error, "out of (host) memory");
}

void HostMemoryAsGpus::release(int, void* p) noexcept { std::free(p); }

Status HostMemoryAsGpus::copy(void* dst, int, const void* src, int, std::size_t bytes) {
  std::memcpy(dst, src, bytes);
  ++copies_;
  return Status::ok();
}

Status HostMemoryAsGpus::memset_zero(int, void* p, std::size_t bytes) {
  std::memset(p, 0, bytes);
  return Status::ok();
}

} // namespace chorus::fake
