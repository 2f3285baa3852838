// The table of every CHORUS_* variable: what it takes, its default, what it does, who reads it.
// docs/settings.md and the README are made from it: edit here, then scripts/settings_doc.sh.
#include "core/settings.hpp"

#include <array>

namespace chorus {

namespace {
using enum SettingId;
using R = SettingReader;
using K = SettingKind;
constexpr uint64_t kDay = 86400000;  // ms
constexpr uint64_t kSecondUs = 1000000;

constexpr std::array<Setting, static_cast<std::size_t>(SettingId::count)> kSettings{{
    {debug, "CHORUS_DEBUG", R::library, K::text, 0, 0, 0, "unset: silent (or `Config::debug`)",
     "Log level: `error`, `warn`, `info` or `trace` (`none`: silent). Wins over `Config::debug`; a value that is none "
     "of these leaves the log silent and makes the process ignore `Config::debug` too (empty counts as unset). See "
     "[Logging](observability.md#logging-coreloghpp).",
     "log level ([observability](docs/observability.md))", "`core/log.cpp`"},
    {debug_subsys, "CHORUS_DEBUG_SUBSYS", R::library, K::text, 0, 0, 0, "all (or `Config::debug_subsys`)",
     "Which subsystems log: a comma-separated list of `init`, `op`, `net`, `shm`, `orch`, `cuda`, or `all`. Wins over "
     "`Config::debug_subsys`; a list with an unknown name is ignored as a whole (all subsystems), and so is "
     "`Config::debug_subsys` (empty counts as unset).",
     "the subsystems that log", "`core/log.cpp`"},
    {flight_recorder, "CHORUS_FLIGHT_RECORDER", R::library, K::number, 256, 0, 1048576, "256 (`Config::flight_recorder`)",
     "Ops the flight recorder keeps per local peer; `0` turns it off. Another value is an `invalid_config` error at "
     "registration naming the variable. See [Flight recorder](observability.md#flight-recorder-observabilityflight).",
     "ops the flight recorder keeps per peer", "`observability/flight/flight_recorder.cpp`"},
    {flight_dir, "CHORUS_FLIGHT_DIR", R::library, K::text, 0, 0, 0, "`Config::flight_dir`, else `$TMPDIR`, else `/tmp`",
     "Where a process writes its recorder (`chorus-flight-PID-K.txt`) when an op fails or on `SIGUSR1`. ctest sets it "
     "to `build/tests/flight-records`.",
     "where flight recorders are written", "`observability/flight/flight_recorder.cpp`"},
    {flight_signal, "CHORUS_FLIGHT_SIGNAL", R::library, K::text, 0, 0, 0, "on (`Config::flight_signal`)",
     "`0`: `kill -USR1 PID` does not write the recorders; any other value: it does (unless the host app has its own "
     "`SIGUSR1` handler).",
     "`0`: `SIGUSR1` does not write the recorders", "`observability/flight/flight_recorder.cpp`"},
    {trace, "CHORUS_TRACE", R::library, K::text, 0, 0, 0, "unset: no trace (or `Config::trace_file`)",
     "File each process writes its trace to when its `Runtime` shuts down (Chrome Trace Event Format): `%p` becomes "
     "the process id, `%n` the node id, `%%` a `%`; in multi-node mode a name with neither gets `.nodeN` before its "
     "extension. A `%` followed by anything else is an `invalid_config` error at registration naming `CHORUS_TRACE`. "
     "See [Trace](observability.md#trace-observabilitytrace).",
     "the trace file each process writes (Perfetto)", "`observability/trace/trace.cpp` (names: `core/trace_name.hpp`)"},
    {spin_us, "CHORUS_SPIN_US", R::library, K::number, 20, 0, kSecondUs, "20 (µs)",
     "How long a wait spins before it sleeps (between peer threads, on the shared-memory rings between processes of "
     "one host, in the arena), where threads do not outnumber the cores (else it does not spin at all: see "
     "`CHORUS_YIELD_US`). `0`: sleep at once.",
     "how long waits spin before they sleep", "`core/wait.cpp`"},
    {yield_us, "CHORUS_YIELD_US", R::library, K::number, 200, 0, kSecondUs, "200 (µs)",
     "Where threads outnumber the cores: how long a wait gives the core away (`sched_yield`) between looks before it "
     "sleeps; for peer threads, the rings, the arena and sockets alike. `0`: sleep at once.",
     "how long waits yield, where threads outnumber cores", "`core/wait.cpp`"},
    {socket_spin_us, "CHORUS_SOCKET_SPIN_US", R::library, K::number, 200, 0, kSecondUs, "200 (µs)",
     "How long a thread waiting for a small receive from another node (256 KiB or less) polls before it sleeps in "
     "epoll, where threads do not outnumber the cores (where they do, it yields between looks for `CHORUS_YIELD_US` "
     "instead). `0`: sockets are never polled, neither by spinning nor by yielding. ctest sets it to `0` for most "
     "cases (docs/testing.md says which poll).",
     "how long a small receive polls its socket", "`core/wait.cpp`"},
    {data_port_from_any, "CHORUS_DATA_PORT_FROM_ANY", R::library, K::flag, 0, 0, 1, "0",
     "`1`: a node's data port takes connections from any address (behind NAT, where nodes connect from other addresses "
     "than the data addresses they advertised); the hello still checks each. `0`: a connection from an address that is "
     "none of the expected nodes' is closed at once, unread (and each node connects from its advertised address). "
     "Another value fails the setup, naming the variable.",
     "`1`: data ports admit any address (NAT)", "`mesh/data_mesh.cpp`"},
    {arena_kib, "CHORUS_ARENA_KIB", R::library, K::number, 64, 0, 1048576, "64 (KiB)",
     "The arena slot of each peer, in KiB: small ops of the world on host tensors whose input fits run in the arena "
     "(see [the arena](api.md#small-ops-where-peers-share-memory-the-arena-strategiesarenahpp)). `0` turns the arena "
     "off. The slot is also bounded by a share of 4 MiB (4 MiB / (2 x peers)), but never below 4 KiB unless asked for "
     "less. In a multi-node job on one host, node 0 sizes the shared arena with its own value: set it alike on every "
     "node process.",
     "the arena of small ops: slot size", "`strategies/tuning.cpp`"},
    {arena_wait_ms, "CHORUS_ARENA_WAIT_MS", R::library, K::number, 50, 0, kDay, "50 (ms)",
     "How long an arena op (host tensors; GPU tensors of the peers of one process) waits for its last peer before it "
     "takes the ordinary path; never more than a quarter of the op's timeout (`Config::timeout`). GPU ops of node "
     "processes sharing a GPU (`cuda-ipc`) wait up to half the op's timeout instead, whatever this says. Some suites "
     "set it to 60000.",
     "the arena's wait for its last peer", "`strategies/tuning.cpp`"},
    {shm_ring_kib, "CHORUS_SHM_RING_KIB", R::library, K::number, 4096, 64, 1048576, "4096 (4 MiB)",
     "Capacity of each direction's ring between two node processes of one host that share memory, in KiB. See "
     "[Processes of one host](benchmarks.md#processes-of-one-host-shared-memory).",
     "the shared-memory rings between processes of one host", "`transport/shm/shm_channel.cpp`"},
    {p2p_eager_kib, "CHORUS_P2P_EAGER_KIB", R::library, K::number, 65536, 0, 65536, "65536 (64 MiB)",
     "Sends across nodes (send/recv): how much of this node's data may travel to one other node ahead of the "
     "receives that take it, in KiB (MPI's eager limit, as a budget): a send whose data does not fit what its node "
     "already has unanswered there sends its header alone, and its data once the receive pulls it (a round trip "
     "more). `0`: every send's data waits for its receive. The receiving node holds each node to 64 MiB, the most "
     "this takes, so nodes may set it differently. See [multi-node.md](multi-node.md) (send/recv across nodes).",
     "send/recv across nodes: data sent ahead of its receive", "`actors/global_client/global_client.cpp`"},
    {p2p_eager_message_kib, "CHORUS_P2P_EAGER_MESSAGE_KIB", R::library, K::number, 1024, 0, 65536, "1024 (1 MiB)",
     "Sends across nodes (send/recv): the largest message whose data goes with its header (within "
     "`CHORUS_P2P_EAGER_KIB`), in KiB; a larger one's data waits for the receive's pull, which lands it straight "
     "in the receiving tensor (no copy) for a round trip more: worth it from about 1 MiB. See "
     "[benchmarks.md](benchmarks.md#point-to-point-between-processes).",
     "send/recv across nodes: the largest message sent eagerly", "`strategies/planner.cpp`"},
    {p2p_local_eager_kib, "CHORUS_P2P_LOCAL_EAGER_KIB", R::library, K::number, 256, 0, 65536, "256 (256 KiB)",
     "Sends between peers of one process (send/recv of host tensors): the largest message that the second of the "
     "pair to arrive copies as it pairs them, in KiB, so that neither waits for the other's thread to wake (what "
     "many small messages in flight cost). A larger one is copied by the receiver's thread, which then holds the "
     "data it reads next in its cache: faster from about 1 MiB. `0`: the receiver copies every message with data. "
     "See [benchmarks.md](benchmarks.md#sendrecv-in-one-process).",
     "send/recv in one process: the largest message copied as it is paired", "`strategies/planner.cpp`"},

    {rank, "CHORUS_RANK", R::from_env, K::number, 0, 0, 65535, "unset",
     "This process's rank, below `CHORUS_WORLD_SIZE` (chorus-run sets both; so do torchrun's `RANK`/`WORLD_SIZE`, "
     "Open MPI's `OMPI_COMM_WORLD_RANK`/`_SIZE`, MPICH's `PMI_RANK`/`PMI_SIZE`, Slurm's `SLURM_PROCID`/"
     "`SLURM_NTASKS`: [which wins](launching.md#which-launchers-numbering)). One set without the other is an error.",
     "this process's rank, as chorus-run sets it ([launching](docs/launching.md#which-launchers-numbering))",
     "`core/launch_env.cpp`"},
    {world_size, "CHORUS_WORLD_SIZE", R::from_env, K::number, 1, 1, 65536, "unset: one process",
     "The job's processes. Unset, or 1: one process.", "the job's processes", "`core/launch_env.cpp`"},
    {local_rank, "CHORUS_LOCAL_RANK", R::from_env, K::number, 0, 0, 65535, "unset",
     "This process's index among the job's processes on its host (chorus-run sets it; the Python package's "
     "`get_local_rank()` reads it).",
     "the process's index among its host's", "`launch/rank_env.cpp` (sets), `python/chorus/torch_api/communication.py`"},
    {local_world_size, "CHORUS_LOCAL_WORLD_SIZE", R::from_env, K::number, 1, 1, 65536, "unset",
     "The job's processes on this host; equal to the world size, it says the job is on one host (the rendezvous file "
     "may serve).",
     "the job's processes on this host", "`core/launch_env.cpp`"},
    {peers, "CHORUS_PEERS", R::from_env, K::number, 1, 1, 4096, "1", "Peers of this process (`Config::num_devices`).",
     "peers of this process (`Config::num_devices`)", "`core/config_env.cpp`"},
    {orchestrator, "CHORUS_ORCHESTRATOR", R::from_env, K::text, 0, 0, 0, "unset",
     "`host:port` of an orchestrator that is there (chorus-run's, a daemon's). Unset: `MASTER_ADDR`:`MASTER_PORT` "
     "(rank 0 hosts it), else on one host a rendezvous file in `$TMPDIR/chorus-<uid>/`.",
     "`host:port` of a running orchestrator; else `MASTER_ADDR`/`MASTER_PORT`, where rank 0 hosts it "
     "([launching](docs/launching.md#where-the-orchestrator-is))",
     "`core/config_env.cpp`"},
    {node_address, "CHORUS_NODE_ADDRESS", R::from_env, K::text, 0, 0, 0,
     "the host's address toward the orchestrator (loopback with a rendezvous file)",
     "Host (or `host:port`) this process's data plane listens on.", "where this process's data plane listens",
     "`core/config_env.cpp`"},
    {secret_file, "CHORUS_SECRET_FILE", R::from_env, K::text, 0, 0, 0, "unset",
     "A file whose first line is the orchestrator's secret; wins over `CHORUS_SECRET`.",
     "a file holding the orchestrator's secret", "`core/config_env.cpp`, `launch/job_secret.cpp`"},
    {timeout_ms, "CHORUS_TIMEOUT_MS", R::from_env, K::number, 30000, 1, kDay, "30000",
     "The op timeout (`Config::timeout`), this process's own.", "the op timeout (each process's own)",
     "`core/config_env.cpp`"},
    {join_timeout_ms, "CHORUS_JOIN_TIMEOUT_MS", R::from_env, K::number, 30000, 1, kDay, "the op timeout",
     "How long the join may take (`Config::join_timeout`).", "how long the join may take", "`core/config_env.cpp`"},
    {seal_data, "CHORUS_SEAL_DATA", R::from_env, K::flag, 0, 0, 1, "0",
     "`1`: the data connections between nodes of different hosts are TLS 1.3 keyed by the secret and the job's token, "
     "without certificates (`Config::seal_data`; every node alike; needs a secret, which chorus-run always gives). `0`: "
     "plain TCP, authenticated by the token. Certificate files (`Config::tls_*`) take precedence. See "
     "[multi-node.md](multi-node.md#reliability-and-security-the-front-door).",
     "`1`: the data connections between hosts are TLS keyed by the secret too "
     "([multi-node](docs/multi-node.md#reliability-and-security-the-front-door))",
     "`core/config_env.cpp`"},
    {elastic, "CHORUS_ELASTIC", R::from_env, K::flag, 0, 0, 1, "0",
     "`1`: an elastic job (`Config::elastic`): newcomers may join it after it started ([elastic.md](elastic.md)); "
     "chorus-run `--elastic` sets it.",
     "`1`: newcomers may join the job after it started ([elastic](docs/elastic.md))", "`core/config_env.cpp`"},
    {join, "CHORUS_JOIN", R::from_env, K::flag, 0, 0, 1, "0",
     "`1`: this process is a newcomer to a running elastic job (chorus-run `--join` sets it, with `CHORUS_ORCHESTRATOR`, "
     "required, and `CHORUS_SECRET`): no rank of its own; it waits in its join until the members grow.",
     "`1`: this process is a newcomer to a running elastic job", "`core/config_env.cpp`"},

    {secret, "CHORUS_SECRET", R::programs, K::text, 0, 0, 0, "none",
     "The orchestrator's shared secret, kept off command lines (`ps` shows them); it also keys the TLS of the links to "
     "the orchestrator. `chorus-orchestrator` takes it when neither `--secret` nor its config file sets one, and "
     "`chorus-ctl status` when neither `--secret-file` nor `--secret` does; `chorus-bench` when `--secret` is not "
     "given (with `--nodes` and neither, the launcher makes a random one, and hands it to the daemon and node "
     "processes it starts through this variable); the examples `chorus-node-example` and `chorus-gpu-nodes-example` "
     "put it into `Config::secret`. The library reads it in `Config::from_env()` only; otherwise a host app sets "
     "`Config::secret`. See [the front door](multi-node.md#reliability-and-security-the-front-door).",
     "the orchestrator's shared secret (never a command line); it also keys the TLS of the links to the orchestrator",
     "`core/secret.cpp` (for `core/config_env.cpp`, `launch/job_secret.cpp`, `programs/daemon_main.cpp`, "
     "`programs/ctl_main.cpp`), `bench/node_launcher.cpp`, `bench/node_run.cpp`, `examples/multi_node.cpp`, "
     "`examples/gpu_nodes.cpp`"},
    {run_ssh, "CHORUS_RUN_SSH", R::programs, K::text, 0, 0, 0, "`ssh`",
     "The command `chorus-run --hosts` starts processes on other hosts with, split at blanks (`CHORUS_RUN_SSH=\"ssh -p "
     "2222\"`). See [chorus-run](launching.md#chorus-run).",
     "how `chorus-run --hosts` reaches other hosts (default `ssh`)", "`launch/chorus_run_main.cpp`"},
    {bench_node_id_fd, "CHORUS_BENCH_NODE_ID_FD", R::programs, K::number, 0, 0, 65535, "unset",
     "Internal to `chorus-bench --nodes`: the launcher sets it in each node process it starts, naming a pipe on which "
     "that process's first peer writes its node id. Not for users.",
     "", "`bench/node_launcher.cpp` (sets), `bench/node_run.cpp` (reads)"},
    {extra_packages, "CHORUS_EXTRA_PACKAGES", R::programs, K::text, 0, 0, 0, "unset",
     "More Debian packages for `scripts/setup.sh` to install in the same apt run (CI names Slurm, and clang for the "
     "fuzzers).",
     "", "`scripts/setup.sh`"},

    {fault_seed_base, "CHORUS_FAULT_SEED_BASE", R::tests, K::number, 0, 0, 1000000000, "0",
     "Added to the seeds of `FaultInjection/Seeded.Fault` (ctest runs seeds 0-19); `scripts/fault_soak.sh N BASE` sets "
     "it to move the window.",
     "", "`tests/fault_injection_test.cpp`"},
    {fault_kind, "CHORUS_FAULT_KIND", R::tests, K::text, 0, 0, 0, "unset: each seed draws its fault",
     "`kill`, `freeze`, `orchestrator`, `closed` or `stalled`: every seed injects that fault (the rest of its case as "
     "drawn); another value fails the case. `scripts/fault_soak.sh N BASE KIND` sets it.",
     "", "`tests/fault_injection_test.cpp`"},
    {teardown_exit, "CHORUS_TEARDOWN_EXIT", R::tests, K::text, 0, 0, 0, "unset",
     "Internal to `gpu_teardown_test`: set in the child it starts, naming how the child ends its process.", "",
     "`tests/gpu_teardown_test.cpp`"},
    {pythonpath, "CHORUS_PYTHONPATH", R::tests, K::text, 0, 0, 0, "unset",
     "The `PYTHONPATH` `tests/python/launch_ranks.py` gives the ranks it starts, when `--pythonpath` is not given.",
     "", "`tests/python/launch_ranks.py`"},
    {smoke_dtypes, "CHORUS_SMOKE_DTYPES", R::tests, K::text, 0, 0, 0, "`f16 bf16 f32 f64 i8 u8 i32 i64`",
     "The dtypes `bench/smoke.sh` (ctest's `bench_smoke`) runs, separated by blanks; the sanitizer builds set "
     "`bf16 f32 i32`.",
     "", "`bench/smoke.sh`"},
    {run_test_out, "CHORUS_RUN_TEST_OUT", R::tests, K::text, 0, 0, 0, "unset",
     "Internal to `chorus_run_test`: the file a launched program's standard output goes to.", "",
     "`tests/chorus_run_test.cpp`"},
    {run_test_err, "CHORUS_RUN_TEST_ERR", R::tests, K::text, 0, 0, 0, "unset",
     "Internal to `chorus_run_test`: the file a launched program's standard error goes to.", "",
     "`tests/chorus_run_test.cpp`"},
}};

constexpr bool in_order() {
  for (std::size_t i = 0; i < kSettings.size(); ++i)
    if (static_cast<std::size_t>(kSettings[i].id) != i) return false;
  return true;
}
static_assert(in_order(), "the table lists the settings in SettingId's order");
} // namespace

std::span<const Setting> settings() { return kSettings; }

const Setting& setting(SettingId id) { return kSettings[static_cast<std::size_t>(id)]; }

} // namespace chorus
