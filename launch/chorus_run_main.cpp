// chorus-run: the launcher (mpirun, torchrun). It hosts the job's orchestrator in this process,
// starts N processes of a program (here, or through ssh on the hosts --hosts names) with the
// CHORUS_* environment chorus::Config::from_env reads, and supervises them until they end
// (launch/supervisor.hpp). docs/launching.md describes it.
#include <limits.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "actors/orchestrator/hosted.hpp"
#include "core/env.hpp"
#include "transport/rendezvous_file.hpp"
#include "launch/free_port.hpp"
#include "launch/job_secret.hpp"
#include "launch/placement.hpp"
#include "launch/program_path.hpp"
#include "launch/rank_env.hpp"
#include "launch/run_options.hpp"
#include "launch/signal_watch.hpp"
#include "launch/ssh_command.hpp"
#include "launch/supervisor.hpp"

extern char** environ;

namespace {

using namespace chorus;
using namespace chorus::launch;

constexpr uint64_t kDefaultAdmissionMs = 60000;

int usage_error(const std::string& what) {
  std::cerr << "chorus-run: " << what << "\n(see chorus-run --help)\n";
  return 2;
}
int fail(const std::string& what, int code) {
  std::cerr << "chorus-run: " << what << "\n";
  return code;
}

// Where an elastic job says how to join it when --join-file names no file: a directory only this
// user may enter (write_rendezvous makes it so), named for this process.
std::string default_join_file() {
  auto runtime = env_text("XDG_RUNTIME_DIR");
  if (runtime && ::access(runtime->c_str(), W_OK | X_OK) != 0) runtime.reset();
  const std::string dir = runtime ? *runtime + "/chorus" : env_text("TMPDIR").value_or("/tmp") + "/chorus-" + std::to_string(getuid());
  return dir + "/chorus-run-" + std::to_string(getpid()) + ".join";
}

// chorus-run --join F: newcomers to a running elastic job, here, with the job's orchestrator and
// secret as F says (docs/elastic.md); they wait in their join until the members grow.
int join_job(const RunOptions& opts, const SignalWatch& watch) {
  const auto limit = std::chrono::milliseconds(opts.join_timeout_ms.value_or(kDefaultAdmissionMs));
  auto r = read_rendezvous(opts.join, Clock::now() + limit);
  if (!r) return fail(r.status().message(), 1);
  auto found = find_program(opts.program);
  if (!found) return fail("cannot run " + found.status().message(), 127);
  JobEnv job;
  job.world_size = opts.processes;
  job.peers = opts.peers;
  job.orchestrator = "127.0.0.1:" + std::to_string(r->port);
  job.join_timeout_ms = opts.join_timeout_ms.value_or(kDefaultAdmissionMs);
  job.local_node_address = "127.0.0.1";
  job.extra = {{"CHORUS_ELASTIC", "1"}, {"CHORUS_JOIN", "1"}};
  std::vector<ProcessPlan> plans;
  for (uint32_t k = 0; k < opts.processes; ++k) {
    RankPlace place;
    place.rank = k;
    place.local_rank = k;
    place.local_world_size = opts.processes;
    place.host = "localhost";
    place.local = true;
    ProcessPlan plan;
    plan.rank = k;
    plan.host = place.host;
    SpawnRequest& req = plan.request;
    req.mask = watch.child_mask;
    req.sigpipe_ignored = watch.sigpipe_ignored;
    req.path = *found;
    req.argv.push_back(opts.program);
    req.argv.insert(req.argv.end(), opts.args.begin(), opts.args.end());
    EnvVars env = rank_env(place, job);
    env.emplace_back("CHORUS_SECRET", r->secret);
    req.env = merged_environment(environ, env);
    req.input = SpawnRequest::Input::null;
    plans.push_back(std::move(plan));
  }
  return supervise(std::move(plans), watch.fd, opts.tag_output, true);
}

} // namespace

int main(int argc, char** argv) {
  auto opts = parse_run_options(std::vector<std::string>(argv + 1, argv + argc));
  if (!opts) return usage_error(opts.status().message());
  if (opts->help) {
    std::cout << run_usage();
    return 0;
  }
  // Before the orchestrator's threads exist, so that they inherit the mask.
  auto watch = watch_signals();
  if (!watch) return fail(watch.status().message(), 1);
  if (!opts->join.empty()) return join_job(*opts, *watch);

  auto secret = job_secret(opts->secret_file);
  if (!secret) return fail(secret.status().message(), secret.status().code() == Errc::invalid_argument ? 2 : 1);
  // The processes get the secret itself (CHORUS_SECRET); a file named for chorus-run would win
  // over it in their Config::from_env.
  unsetenv("CHORUS_SECRET_FILE");

  const std::string hostname = this_hostname();
  auto places = place_ranks(opts->hosts, opts->processes, hostname);
  if (!places) return usage_error(places.status().message());
  bool any_remote = false, any_local = false;
  for (const auto& p : *places) (p.local ? any_local : any_remote) = true;

  // Where the processes reach this machine: loopback while they all run here, else a name that
  // other hosts resolve to it.
  std::string here = opts->orchestrator_address;
  if (here.empty()) here = any_remote ? hostname : "127.0.0.1";
  if (here.empty()) return usage_error("cannot tell this machine's name: give --orchestrator-address");

  // What the processes run, found now: a program that cannot run starts no orchestrator and no process.
  std::string program_path, ssh_path, cwd;
  const std::vector<std::string> ssh = ssh_program(std::getenv("CHORUS_RUN_SSH"));
  if (any_local) {
    auto found = find_program(opts->program);
    if (!found) return fail("cannot run " + found.status().message(), 127);
    program_path = *found;
  }
  if (any_remote) {
    auto found = find_program(ssh.front());
    if (!found) return fail("cannot run " + found.status().message(), 127);
    ssh_path = *found;
    char dir[PATH_MAX];
    if (getcwd(dir, sizeof dir) == nullptr) return fail("cannot tell the working directory for the remote hosts", 1);
    cwd = dir;
  }

  // Every node's connection costs the orchestrator's door three descriptors (as for the daemon):
  // take what the system allows rather than a shell's default soft limit. The processes get the
  // limit chorus-run was given back.
  rlimit given{};
  const bool raised = getrlimit(RLIMIT_NOFILE, &given) == 0 && given.rlim_cur < given.rlim_max;
  if (raised) {
    rlimit all = given;
    all.rlim_cur = all.rlim_max;
    setrlimit(RLIMIT_NOFILE, &all);
  }

  HostedOrchestrator::Options o;
  o.host = here == "127.0.0.1" ? "127.0.0.1" : "0.0.0.0";  // other hosts must get in
  o.nodes = opts->processes;
  o.secret = *secret;
  o.admission = std::chrono::milliseconds(opts->join_timeout_ms.value_or(kDefaultAdmissionMs));
  auto orchestrator = HostedOrchestrator::start(o);
  if (!orchestrator) return fail(orchestrator.status().message(), 1);

  JobEnv job;
  job.world_size = opts->processes;
  job.peers = opts->peers;
  job.orchestrator = here + ":" + std::to_string((*orchestrator)->port());
  // Every process waits for its join as long as the orchestrator admits (not its op timeout).
  job.join_timeout_ms = opts->join_timeout_ms.value_or(kDefaultAdmissionMs);
  job.local_node_address = here;
  // torchrun's variables too, for torch.distributed's env:// (its store on rank 0's host).
  for (const auto& place : *places)
    if (place.rank == 0) job.master_addr = place.local ? here : place.host;
  job.master_port = free_port();
  std::string join_file;
  if (opts->elastic) {
    job.extra.emplace_back("CHORUS_ELASTIC", "1");
    join_file = opts->join_file.empty() ? default_join_file() : opts->join_file;
    if (auto s = write_rendezvous(join_file, {(*orchestrator)->port(), *secret}); !s)
      return fail("cannot write the join file: " + s.message(), 1);
    std::cerr << "chorus-run: elastic job; newcomers join with: chorus-run --join " << join_file << " -n K "
              << opts->program << "\n";
  }

  std::vector<ProcessPlan> plans;
  for (const auto& place : *places) {
    ProcessPlan plan;
    plan.rank = place.rank;
    plan.host = place.host;
    plan.remote = !place.local;
    SpawnRequest& req = plan.request;
    req.mask = watch->child_mask;
    req.sigpipe_ignored = watch->sigpipe_ignored;
    req.nofile = given;
    req.restore_nofile = raised;
    EnvVars env = rank_env(place, job);
    if (place.local) {
      req.path = program_path;
      req.argv.push_back(opts->program);
      req.argv.insert(req.argv.end(), opts->args.begin(), opts->args.end());
      env.emplace_back("CHORUS_SECRET", *secret);
      req.env = merged_environment(environ, env);
      // As mpirun: rank 0 reads chorus-run's standard input, the others read nothing.
      req.input = place.rank == 0 ? SpawnRequest::Input::inherit : SpawnRequest::Input::null;
    } else {
      req.path = ssh_path;
      req.argv = ssh_argv(ssh, place.host, remote_script(cwd, env, opts->program, opts->args));
      req.env = merged_environment(environ, {});
      req.input = SpawnRequest::Input::pipe;
      plan.first_input = *secret + "\n";
    }
    plans.push_back(std::move(plan));
  }
  const int status = supervise(std::move(plans), watch->fd, opts->tag_output, opts->elastic);
  if (!join_file.empty()) ::unlink(join_file.c_str());
  orchestrator->reset();  // the door closes, then the actor system stops
  return status;
}
