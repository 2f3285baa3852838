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
#include <optional>
#include <string>
#include <vector>

#include "actors/orchestrator/hosted.hpp"
#include "core/env.hpp"
#include "core/host_names.hpp"
#include "core/settings.hpp"
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
std::string default_join_file() { return private_file_dir() + "/chorus-run-" + std::to_string(getpid()) + ".join"; }

// What every process's request starts from: its rank and host, and the signals it starts with.
ProcessPlan plan_for(const RankPlace& place, const SignalWatch& watch) {
  ProcessPlan plan;
  plan.rank = place.rank;
  plan.host = place.host;
  plan.remote = !place.local;
  plan.request.mask = watch.child_mask;
  plan.request.sigpipe_ignored = watch.sigpipe_ignored;
  return plan;
}

// How the processes start: PROG found here for the local ones, ssh (CHORUS_RUN_SSH) and the
// working directory for the remote ones; found before anything starts, so that a program that
// cannot run starts no orchestrator and no process.
struct Starter {
  std::string program_path, ssh_path, cwd;
  std::vector<std::string> ssh;
};
// The error is the exit status and what to say.
struct StartError {
  int status;
  std::string what;
};
std::optional<StartError> find_starter(const RunOptions& opts, const std::vector<RankPlace>& places, Starter& s) {
  bool any_remote = false, any_local = false;
  for (const auto& p : places) (p.local ? any_local : any_remote) = true;
  s.ssh = ssh_program(chorus::setting_text(chorus::SettingId::run_ssh).value_or("").c_str());
  if (any_local) {
    auto found = find_program(opts.program);
    if (!found) return StartError{127, "cannot run " + found.status().message()};
    s.program_path = *found;
  }
  if (any_remote) {
    auto found = find_program(s.ssh.front());
    if (!found) return StartError{127, "cannot run " + found.status().message()};
    s.ssh_path = *found;
    char dir[PATH_MAX];
    if (getcwd(dir, sizeof dir) == nullptr) return StartError{1, "cannot tell the working directory for the remote hosts"};
    s.cwd = dir;
  }
  return std::nullopt;
}

// The request that starts one process: here, PROG with chorus-run's environment, the job's
// variables and the secret on top, and `input` as its standard input; on another host, ssh with
// the remote script, the secret on its input's first line.
void start_request(ProcessPlan& plan, const Starter& s, const RunOptions& opts, EnvVars env, const std::string& secret,
                   SpawnRequest::Input input) {
  SpawnRequest& req = plan.request;
  if (!plan.remote) {
    req.path = s.program_path;
    req.argv.push_back(opts.program);
    req.argv.insert(req.argv.end(), opts.args.begin(), opts.args.end());
    env.emplace_back("CHORUS_SECRET", secret);
    req.env = merged_environment(environ, env);
    req.input = input;
  } else {
    req.path = s.ssh_path;
    req.argv = ssh_argv(s.ssh, plan.host, remote_script(s.cwd, env, opts.program, opts.args));
    req.env = merged_environment(environ, {});
    req.input = SpawnRequest::Input::pipe;
    plan.first_input = secret + "\n";
  }
}

// chorus-run --join F: newcomers to a running elastic job, with the job's orchestrator and secret
// as F says (docs/elastic.md), here or on the hosts --hosts names; they wait in their join until
// the members grow. F is read where the job's chorus-run wrote it (it names that process).
int join_job(const RunOptions& opts, const SignalWatch& watch) {
  // The newcomers get the file's secret itself; a file named for chorus-run would win over it.
  unsetenv("CHORUS_SECRET_FILE");
  const auto limit = std::chrono::milliseconds(opts.join_timeout_ms.value_or(kDefaultAdmissionMs));
  auto r = read_rendezvous(opts.join, Clock::now() + limit);
  if (!r) return fail(r.status().message(), 1);
  // Where the job's own processes reach the orchestrator (a file of an older chorus-run names none:
  // loopback); the newcomers here are named as those processes here are.
  const std::string here = r->host.empty() ? "127.0.0.1" : r->host;
  auto places = place_ranks(opts.hosts, opts.processes, this_hostname());
  if (!places) return usage_error(places.status().message());
  for (const auto& place : *places)
    if (!place.local && is_loopback_host(here) && !is_loopback_host(place.host))
      return usage_error("the job of " + opts.join + " is reached on loopback only (" + here + "), so newcomers on " +
                         place.host + " cannot join it: start the elastic job with --hosts naming another host, or "
                         "with --orchestrator-address and a name other hosts reach this machine by");
  Starter starter;
  if (auto e = find_starter(opts, *places, starter)) return fail(e->what, e->status);
  JobEnv job;
  job.world_size = opts.processes;
  job.peers = opts.peers;
  job.orchestrator = host_port(here, r->port);
  job.join_timeout_ms = opts.join_timeout_ms.value_or(kDefaultAdmissionMs);
  job.local_node_address = here;
  job.extra = {{"CHORUS_ELASTIC", "1"}, {"CHORUS_JOIN", "1"}};
  std::vector<ProcessPlan> plans;
  for (const auto& place : *places) {
    ProcessPlan plan = plan_for(place, watch);
    start_request(plan, starter, opts, rank_env(place, job), r->secret, SpawnRequest::Input::null);
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
  bool any_remote = false;
  for (const auto& p : *places) any_remote = any_remote || !p.local;

  // Where the processes reach this machine: loopback while they all run here, else a name that
  // other hosts resolve to it.
  std::string here = opts->orchestrator_address;
  if (here.empty()) here = any_remote ? hostname : "127.0.0.1";
  if (here.empty()) return usage_error("cannot tell this machine's name: give --orchestrator-address");

  Starter starter;
  if (auto e = find_starter(*opts, *places, starter)) return fail(e->what, e->status);

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
  job.orchestrator = host_port(here, (*orchestrator)->port());
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
    // Newcomers reach the orchestrator where this job's processes do (on other hosts too, unless
    // that is loopback).
    if (auto s = write_rendezvous(join_file, {(*orchestrator)->port(), *secret, here}); !s)
      return fail("cannot write the join file: " + s.message(), 1);
    std::cerr << "chorus-run: elastic job; newcomers join with: chorus-run --join " << join_file << " -n K "
              << (is_loopback_host(here) ? "" : "[--hosts H1,H2,...] ") << opts->program << "\n";
  }

  std::vector<ProcessPlan> plans;
  for (const auto& place : *places) {
    ProcessPlan plan = plan_for(place, *watch);
    SpawnRequest& req = plan.request;
    req.nofile = given;
    req.restore_nofile = raised;
    // As mpirun: rank 0 reads chorus-run's standard input, the others read nothing.
    start_request(plan, starter, *opts, rank_env(place, job), *secret,
                  place.rank == 0 ? SpawnRequest::Input::inherit : SpawnRequest::Input::null);
    plans.push_back(std::move(plan));
  }
  const int status = supervise(std::move(plans), watch->fd, opts->tag_output, opts->elastic);
  if (!join_file.empty()) ::unlink(join_file.c_str());
  orchestrator->reset();  // the door closes, then the actor system stops
  return status;
}
