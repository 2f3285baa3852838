// _null_backend: a torch.distributed backend whose every op is done at once, moving nothing. What
// dist.all_reduce costs on it is torch's own part of a call (its Python wrapper, the binding, c10d's
// dispatcher and a Work): the floor under any backend, which bench/torch_overhead.py sets beside
// chorus's and gloo's cost of the same call. Built with the Python package, never installed.
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/python.h>
#include <torch/version.h>
#if TORCH_VERSION_MAJOR >= 2  // torch 2.x runs a c10d::Backend under its ProcessGroup
#include <torch/csrc/distributed/c10d/Backend.hpp>
using NullBase = c10d::Backend;
#else
using NullBase = c10d::ProcessGroup;
#endif

#include <pybind11/chrono.h>

namespace {

class DoneWork : public c10d::Work {
 public:
  DoneWork(c10d::OpType type, std::vector<at::Tensor> outputs) : c10d::Work(-1, type), outputs_(std::move(outputs)) {}
  bool isCompleted() override { return true; }
  bool isSuccess() const override { return true; }
  bool wait(std::chrono::milliseconds) override { return true; }
  std::vector<at::Tensor> result() override { return outputs_; }

 private:
  std::vector<at::Tensor> outputs_;
};

class NullProcessGroup : public NullBase {
 public:
  NullProcessGroup(int rank, int size) : NullBase(rank, size) {}
  const std::string getBackendName() const override { return "null"; }
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& t, const c10d::AllreduceOptions&) override {
    return c10::make_intrusive<DoneWork>(c10d::OpType::ALLREDUCE, t);
  }
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions&) override {
    return c10::make_intrusive<DoneWork>(c10d::OpType::BARRIER, std::vector<at::Tensor>{});
  }
};

}  // namespace

PYBIND11_MODULE(_null_backend, m) {
  m.def("create", [](const c10::intrusive_ptr<c10d::Store>&, int rank, int size, std::chrono::milliseconds) {
    return c10::intrusive_ptr<NullBase>(c10::make_intrusive<NullProcessGroup>(rank, size));
  });
}
