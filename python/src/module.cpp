// The extension module `chorus._chorus`: chorus's errors as Python exceptions, and the "chorus"
// backend's constructor, which chorus/__init__.py registers with torch.distributed.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include "core/env.hpp"
#include "core/launch_env.hpp"
#include "errors.hpp"
#include "join.hpp"
#include "process_group.hpp"
#include "work.hpp"

namespace py = pybind11;
using namespace chorus::python;

namespace {

// torch.distributed's default_pg_timeout.
constexpr std::chrono::milliseconds kTorchDefaultTimeout{30 * 60 * 1000};

// torch.distributed's default group (`global_ranks` empty) joins the collective; a subgroup is a
// group of its peer, or, where the default group has another backend (`own_group`: gloo for the
// host, NCCL for GPUs, chorus for a group beside them), a collective of its own.
c10::intrusive_ptr<C10dBase> create_process_group(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                            int size, std::chrono::milliseconds timeout,
                                                            const std::vector<int64_t>& global_ranks, bool own_group) {
  if (own_group) {
    auto own = World::join_group(store, rank, size, timeout);
    chorus::Peer peer = own->peer();
    return c10::make_intrusive<ProcessGroupChorus>(std::move(own), std::move(peer));
  }
  if (global_ranks.empty()) {
    auto world = World::join(store, rank, size, timeout);
    chorus::Peer peer = world->peer();
    return c10::make_intrusive<ProcessGroupChorus>(std::move(world), std::move(peer));
  }
  auto world = World::current();
  chorus::Peer peer = world->group(global_ranks);
  // torch passes its default (30 minutes) where new_group was given no timeout: the group then
  // keeps the world's (init_process_group's), as it would not otherwise learn it was not given one.
  const bool given = timeout != kTorchDefaultTimeout;
  return c10::make_intrusive<ProcessGroupChorus>(std::move(world), std::move(peer),
                                                 given ? timeout : std::chrono::milliseconds{0});
}

// Elastic membership (docs/elastic.md): the group's next epoch as a new backend object, which
// chorus/elastic.py puts in the old one's place in torch.distributed's tables.
c10::intrusive_ptr<ProcessGroupChorus> next_group(const ProcessGroupChorus& pg, chorus::Result<chorus::Peer> next) {
  chorus::Peer p = value_of(std::move(next));
  if (p.group() == 0) pg.world()->advance(p);
  return c10::make_intrusive<ProcessGroupChorus>(pg.world(), std::move(p), pg.timeout());
}

void bind_elastic(py::module_& m) {
  m.def(
      "_shrink",
      [](const ProcessGroupChorus& pg, std::vector<uint32_t> exclude) {
        pg.world()->check_up();
        return next_group(pg, pg.peer().shrink(std::move(exclude)));
      },
      py::arg("pg"), py::arg("exclude"), py::call_guard<py::gil_scoped_release>(),
      "Peer::shrink: the group (or world) of the members still alive, in its next epoch");
  m.def(
      "_grow",
      [](const ProcessGroupChorus& pg) {
        pg.world()->check_up();
        return next_group(pg, pg.peer().grow());
      },
      py::arg("pg"), py::call_guard<py::gil_scoped_release>(), "Peer::grow: the world grown by the newcomers waiting");
  m.def(
      "_revoke", [](const ProcessGroupChorus& pg) { check(pg.peer().revoke()); }, py::arg("pg"),
      py::call_guard<py::gil_scoped_release>(), "Peer::revoke: every op in flight ends with chorus.Revoked");
  m.def(
      "_epoch", [](const ProcessGroupChorus& pg) { return pg.peer().epoch(); }, py::arg("pg"),
      "the membership epoch: 0 as admitted, one more per shrink or grow");
  m.def(
      "_newcomers", [](const ProcessGroupChorus& pg) { return pg.peer().newcomers(); }, py::arg("pg"),
      "newcomers waiting for a grow, as this process was last told");
  m.def(
      "_members", [](const ProcessGroupChorus& pg) { return pg.peer().members(); }, py::arg("pg"),
      "the group's members as ranks of the world");
  m.def(
      "_join_newcomer",
      [](std::chrono::milliseconds timeout) {
        auto world = World::join_newcomer(timeout);
        chorus::Peer peer = world->peer();
        return c10::make_intrusive<ProcessGroupChorus>(std::move(world), std::move(peer));
      },
      py::arg("timeout"), py::call_guard<py::gil_scoped_release>(),
      "A newcomer's registration (CHORUS_JOIN=1): waits until the members grow, then the grown world");
}

// What the launcher's environment says of this process (core/launch_env.hpp, as chorus's C++
// programs read it), for chorus.torch_api.init_process_group.
void bind_launch(py::module_& m) {
  m.def(
      "_launch_numbering",
      [] {
        const chorus::LaunchNumbering n = value_of(chorus::launch_numbering());
        return py::make_tuple(n.by ? py::object(py::str(n.by->name)) : py::object(py::none()), n.rank, n.world);
      },
      "(launcher or None, rank, world size) from the first launcher whose pair is set; chorus.InvalidConfig "
      "where a pair is half set or a value is out of range");
  m.def(
      "_one_host_store_file",
      []() -> std::optional<std::string> {
        const chorus::LaunchNumbering n = value_of(chorus::launch_numbering());
        if (!n.by || !n.one_host) return std::nullopt;
        const std::string key = chorus::launch_job_key(*n.by, /*with_srun_ports=*/true);
        if (key.empty()) return std::nullopt;
        const std::string dir = chorus::private_file_dir();
        check(chorus::make_private_dir(dir, "store"));
        return dir + "/" + key + ".torchstore";
      },
      "The file the ranks of a one-host srun or mpirun job meet in (torch's FileStore), in this user's private "
      "directory; None where the launcher names no job or its ranks may be on several hosts");
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
  py::class_<ProcessGroupChorus, C10dBase, c10::intrusive_ptr<ProcessGroupChorus>>(
      m, "ProcessGroupChorus", "torch.distributed's \"chorus\" backend (made by init_process_group / new_group)");
  bind_elastic(m);
  bind_launch(m);
  m.def("_create_process_group", &create_process_group, py::arg("store"), py::arg("rank"), py::arg("size"),
        py::arg("timeout"), py::arg("global_ranks"), py::arg("own_group") = false, py::call_guard<py::gil_scoped_release>(),
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
