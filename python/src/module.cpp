// The extension module `chorus._chorus`: chorus's errors as Python exceptions, and the "chorus"
// backend's constructor, which chorus/__init__.py registers with torch.distributed.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include "errors.hpp"
#include "join.hpp"
#include "process_group.hpp"
#include "work.hpp"

namespace py = pybind11;
using namespace chorus::python;

namespace {

// torch.distributed's default group (`global_ranks` empty) joins the collective; a subgroup is a
// group of its peer.
c10::intrusive_ptr<c10d::ProcessGroup> create_process_group(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                            int size, std::chrono::milliseconds timeout,
                                                            const std::vector<int64_t>& global_ranks) {
  if (global_ranks.empty()) {
    auto world = World::join(store, rank, size, timeout);
    chorus::Peer peer = world->peer();
    return c10::make_intrusive<ProcessGroupChorus>(std::move(world), std::move(peer));
  }
  auto world = World::current();
  chorus::Peer peer = world->group(global_ranks);
  return c10::make_intrusive<ProcessGroupChorus>(std::move(world), std::move(peer));
}

} // namespace

PYBIND11_MODULE(_chorus, m) {
  m.doc() = "chorus's extension module: use the package `chorus` (import chorus)";
  bind_errors(m);
  m.attr("__version__") = CHORUS_VERSION;
  m.attr("torch_version") = CHORUS_TORCH_VERSION;  // the torch it was compiled against
#ifdef CHORUS_TORCH_CUDA
  m.attr("cuda") = true;
#else
  m.attr("cuda") = false;
#endif
  py::class_<ProcessGroupChorus, c10d::ProcessGroup, c10::intrusive_ptr<ProcessGroupChorus>>(
      m, "ProcessGroupChorus", "torch.distributed's \"chorus\" backend (made by init_process_group / new_group)");
  m.def("_create_process_group", &create_process_group, py::arg("store"), py::arg("rank"), py::arg("size"),
        py::arg("timeout"), py::arg("global_ranks"), py::call_guard<py::gil_scoped_release>(),
        "The backend's constructor (torch.distributed calls it through chorus's registration)");
  m.def(
      "_shutdown",
      [] {
        World::shutdown_all();
        stop_future_thread();
      },
      py::call_guard<py::gil_scoped_release>(),
      "Ends this process's collective (registered with atexit; ops after it raise chorus.Finished)");
}
