// chorus-run, the launcher (launch/). Its parts in this process: the command line read and checked
// (numbers, hosts and slots, unknown options), ranks laid on hosts, the CHORUS_* variables, sh
// quoting and the ssh command, output cut into tagged lines. And chorus-run as a process, with
// /bin/sh scripts as the processes it starts: what each finds in its environment, mpirun's failure
// rule (the first failure's status, the others ended, SIGKILL after the grace), signals forwarded,
// --tag-output, remote hosts through a fake ssh (the secret on its input, never in its argv), the
// secret's sources, and a program that cannot run. The scripts record what they saw in files of a
// temporary directory, which the tests wait for with a deadline.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "launch/line_tagger.hpp"
#include "launch/placement.hpp"
#include "launch/rank_env.hpp"
#include "launch/run_options.hpp"
#include "launch/ssh_command.hpp"
#include "launch/supervisor.hpp"
#include "testkit/process.hpp"
#include "core/host_names.hpp"
#include "transport/rendezvous_file.hpp"
#include "transport/socket.hpp"

namespace chorus::launch {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;
using chorus::testkit::ChildGuard;

// ---------------------------------------------------------------------------------------------
// The parts, in this process.

Result<RunOptions> parse(std::vector<std::string> args) { return parse_run_options(args); }
std::string error_of(std::vector<std::string> args) {
  auto r = parse(std::move(args));
  return r ? std::string("(accepted)") : r.status().message();
}

TEST(ChorusRunOptions, ReadsEveryOption) {
  auto o = parse({"-n", "4", "--peers=2", "--hosts", "a:3,b", "--secret-file", "/s", "--join-timeout-ms", "9000",
                  "--tag-output", "--orchestrator-address", "head", "prog", "-n", "7", "--peers"});
  ASSERT_TRUE(o) << o.status().to_string();
  EXPECT_EQ(o->processes, 4u);
  EXPECT_EQ(o->peers, 2u);
  ASSERT_EQ(o->hosts.size(), 2u);
  EXPECT_EQ(o->hosts[0].name, "a");
  EXPECT_EQ(o->hosts[0].slots, 3u);
  EXPECT_EQ(o->hosts[1].name, "b");
  EXPECT_EQ(o->hosts[1].slots, 1u);
  EXPECT_EQ(o->secret_file, "/s");
  EXPECT_EQ(o->join_timeout_ms, 9000u);
  EXPECT_TRUE(o->tag_output);
  EXPECT_EQ(o->orchestrator_address, "head");
  EXPECT_EQ(o->program, "prog");
  // Everything after the program is its own, options of chorus-run's names included.
  EXPECT_EQ(o->args, (std::vector<std::string>{"-n", "7", "--peers"}));

  auto short_form = parse({"-n3", "--", "-prog-with-dash", "x"});
  ASSERT_TRUE(short_form) << short_form.status().to_string();
  EXPECT_EQ(short_form->processes, 3u);
  EXPECT_FALSE(short_form->peers);
  EXPECT_FALSE(short_form->join_timeout_ms);
  EXPECT_FALSE(short_form->tag_output);
  EXPECT_TRUE(short_form->hosts.empty());
  EXPECT_EQ(short_form->program, "-prog-with-dash");
  EXPECT_EQ(short_form->args, (std::vector<std::string>{"x"}));

  auto help = parse({"--help"});
  ASSERT_TRUE(help);
  EXPECT_TRUE(help->help);
}

TEST(ChorusRunOptions, ReadsTheElasticOptionsAndRefusesTheirClashes) {
  auto e = parse({"-n", "4", "--elastic", "--join-file", "/j", "prog"});
  ASSERT_TRUE(e) << e.status().to_string();
  EXPECT_TRUE(e->elastic);
  EXPECT_EQ(e->join_file, "/j");
  EXPECT_TRUE(e->join.empty());
  auto j = parse({"-n", "1", "--join=/j", "prog"});
  ASSERT_TRUE(j) << j.status().to_string();
  EXPECT_EQ(j->join, "/j");
  EXPECT_FALSE(j->elastic);
  // Newcomers may go on other hosts; the job's orchestrator and secret are the file's.
  auto h = parse({"-n", "2", "--join", "/j", "--hosts", "a,b", "prog"});
  ASSERT_TRUE(h) << h.status().to_string();
  EXPECT_EQ(h->hosts.size(), 2u);
  for (const char* clash : {"--elastic", "--secret-file=/s", "--orchestrator-address=x", "--join-file=/k"})
    EXPECT_EQ(error_of({"-n", "1", "--join", "/j", clash, "p"}).substr(0, 52),
              "--join starts newcomers with the job's own orchestra")
        << clash;
  EXPECT_EQ(error_of({"-n", "2", "--join-file", "/j", "p"}), "--join-file is for --elastic jobs");
  EXPECT_EQ(error_of({"-n", "2", "--elastic=1", "p"}), "--elastic takes no value");
}

TEST(ChorusRunOptions, RejectsBadNumbers) {
  EXPECT_EQ(error_of({"-n", "0", "p"}), "bad -n 0 (1 to 65536)");
  EXPECT_EQ(error_of({"-n", "65537", "p"}), "bad -n 65537 (1 to 65536)");
  EXPECT_EQ(error_of({"-n", "abc", "p"}), "bad -n 'abc' (a whole number, 1 to 65536)");
  EXPECT_EQ(error_of({"-n", "-1", "p"}), "bad -n '-1' (a whole number, 1 to 65536)");
  EXPECT_EQ(error_of({"-n", "2x", "p"}), "bad -n '2x' (a whole number, 1 to 65536)");
  EXPECT_EQ(error_of({"-n", "99999999999999999999999", "p"}), "bad -n 99999999999999999999999 (1 to 65536)");
  EXPECT_EQ(error_of({"-n", "2", "--peers", "0", "p"}), "bad --peers 0 (1 to 4096)");
  EXPECT_EQ(error_of({"-n", "2", "--join-timeout-ms", "0", "p"}), "bad --join-timeout-ms 0 (1 to 86400000)");
}

TEST(ChorusRunOptions, RejectsUnknownOptionsAndWhatIsMissing) {
  EXPECT_EQ(error_of({"-n", "2", "--frobnicate", "p"}), "unknown option --frobnicate");
  EXPECT_EQ(error_of({"-x", "-n", "2", "p"}), "unknown option -x");
  EXPECT_EQ(error_of({"p"}), "-n is required (the number of processes)");
  EXPECT_EQ(error_of({"-n", "2"}), "no program to run");
  EXPECT_EQ(error_of({"-n", "2", "--"}), "no program to run");
  EXPECT_EQ(error_of({"-n"}), "-n needs a value");
  EXPECT_EQ(error_of({"-n", "2", "--hosts"}), "--hosts needs a value");
  EXPECT_EQ(error_of({"-n", "2", "--tag-output=yes", "p"}), "--tag-output takes no value");
  EXPECT_EQ(error_of({"-n", "2", "--secret-file=", "p"}), "--secret-file needs a file name");
}

TEST(ChorusRunOptions, ReadsHostsAndTheirSlots) {
  auto hosts = parse_hosts("h1:2,h2,10.0.0.3:4");
  ASSERT_TRUE(hosts) << hosts.status().to_string();
  ASSERT_EQ(hosts->size(), 3u);
  EXPECT_EQ((*hosts)[0].name, "h1");
  EXPECT_EQ((*hosts)[0].slots, 2u);
  EXPECT_EQ((*hosts)[1].name, "h2");
  EXPECT_EQ((*hosts)[1].slots, 1u);
  EXPECT_EQ((*hosts)[2].name, "10.0.0.3");
  EXPECT_EQ((*hosts)[2].slots, 4u);

  EXPECT_EQ(parse_hosts("h1:0").status().message(), "bad --hosts entry 'h1:0': slots are a whole number, at least 1");
  EXPECT_EQ(parse_hosts("h1:x").status().message(), "bad --hosts entry 'h1:x': slots are a whole number, at least 1");
  EXPECT_EQ(parse_hosts("h1:").status().message(), "bad --hosts entry 'h1:': slots are a whole number, at least 1");
  EXPECT_EQ(parse_hosts("h1,,h2").status().message(), "bad --hosts entry '': no host name");
  EXPECT_EQ(parse_hosts("h1,").status().message(), "bad --hosts entry '': no host name");
  EXPECT_EQ(parse_hosts(":2").status().message(), "bad --hosts entry ':2': no host name");
  EXPECT_EQ(parse_hosts("-oProxyCommand=x").status().message(),
            "bad --hosts entry '-oProxyCommand=x': a host name does not start with '-'");
  EXPECT_EQ(parse_hosts("").status().message(), "--hosts is empty");
  // Through the command line, with the count of slots against -n.
  EXPECT_EQ(error_of({"-n", "4", "--hosts", "a:2,b", "p"}), "--hosts has 3 slots for 4 processes");
  EXPECT_EQ(error_of({"-n", "2", "--hosts", "a", "p"}), "--hosts has 1 slot for 2 processes");
  EXPECT_EQ(error_of({"-n", "2", "--hosts", "a:0", "p"}), "bad --hosts entry 'a:0': slots are a whole number, at least 1");
  EXPECT_TRUE(parse({"-n", "3", "--hosts", "a:2,b:5", "p"}));  // more slots than processes: the last go unused
}

TEST(ChorusRunPlacement, LaysRanksOnHostsInOrder) {
  const std::vector<HostSlots> hosts{{"localhost", 1}, {"nodeA", 2}, {"myhost", 1}, {"nodeB", 3}};
  auto places = place_ranks(hosts, 5, "myhost.example.org");
  ASSERT_TRUE(places) << places.status().to_string();
  ASSERT_EQ(places->size(), 5u);
  struct Want {
    const char* host;
    bool local;
    uint32_t local_rank, local_world_size;
  };
  // localhost and myhost are this machine: one host for the local ranks and sizes.
  const Want want[] = {{"localhost", true, 0, 2}, {"nodeA", false, 0, 2}, {"nodeA", false, 1, 2},
                       {"myhost", true, 1, 2},    {"nodeB", false, 0, 1}};
  for (uint32_t r = 0; r < 5; ++r) {
    const auto& p = (*places)[r];
    EXPECT_EQ(p.rank, r);
    EXPECT_EQ(p.host, want[r].host) << r;
    EXPECT_EQ(p.local, want[r].local) << r;
    EXPECT_EQ(p.local_rank, want[r].local_rank) << r;
    EXPECT_EQ(p.local_world_size, want[r].local_world_size) << r;
  }
  auto all_here = place_ranks({}, 3, "myhost");
  ASSERT_TRUE(all_here);
  for (uint32_t r = 0; r < 3; ++r) {
    EXPECT_EQ((*all_here)[r].host, "localhost");
    EXPECT_TRUE((*all_here)[r].local);
    EXPECT_EQ((*all_here)[r].local_rank, r);
    EXPECT_EQ((*all_here)[r].local_world_size, 3u);
  }
  EXPECT_EQ(place_ranks({{"a", 2}}, 3, "h").status().message(), "--hosts has 2 slots for 3 processes");

  EXPECT_TRUE(is_local_host("localhost", "node1.example.org"));
  EXPECT_TRUE(is_local_host("127.0.0.1", "node1.example.org"));
  EXPECT_TRUE(is_local_host("node1.example.org", "node1.example.org"));
  EXPECT_TRUE(is_local_host("node1", "node1.example.org"));
  EXPECT_FALSE(is_local_host("node2", "node1.example.org"));
  EXPECT_FALSE(is_local_host("node1.other.org", "node1.example.org"));
  EXPECT_FALSE(is_local_host("node1", ""));
}

TEST(ChorusRunPlacement, GivesEachRankItsVariablesButTheSecret) {
  JobEnv job;
  job.world_size = 4;
  job.peers = 2;
  job.orchestrator = "head:7000";
  job.join_timeout_ms = 1500;
  job.local_node_address = "head";
  const EnvVars local = rank_env(RankPlace{1, "localhost", true, 1, 2}, job);
  EXPECT_EQ(local, (EnvVars{{"CHORUS_RANK", "1"},
                            {"CHORUS_WORLD_SIZE", "4"},
                            {"CHORUS_LOCAL_RANK", "1"},
                            {"CHORUS_LOCAL_WORLD_SIZE", "2"},
                            {"CHORUS_ORCHESTRATOR", "head:7000"},
                            {"CHORUS_NODE_ADDRESS", "head"},
                            {"CHORUS_PEERS", "2"},
                            {"CHORUS_JOIN_TIMEOUT_MS", "1500"}}));
  job.peers.reset();
  job.join_timeout_ms.reset();
  const EnvVars remote = rank_env(RankPlace{3, "nodeB", false, 0, 1}, job);
  EXPECT_EQ(remote, (EnvVars{{"CHORUS_RANK", "3"},
                             {"CHORUS_WORLD_SIZE", "4"},
                             {"CHORUS_LOCAL_RANK", "0"},
                             {"CHORUS_LOCAL_WORLD_SIZE", "1"},
                             {"CHORUS_ORCHESTRATOR", "head:7000"},
                             {"CHORUS_NODE_ADDRESS", "nodeB"}}));
  job.master_addr = "head";
  job.master_port = 29500;
  EXPECT_EQ(rank_env(RankPlace{3, "nodeB", false, 0, 1}, job),
            (EnvVars{{"CHORUS_RANK", "3"},
                     {"CHORUS_WORLD_SIZE", "4"},
                     {"CHORUS_LOCAL_RANK", "0"},
                     {"CHORUS_LOCAL_WORLD_SIZE", "1"},
                     {"CHORUS_ORCHESTRATOR", "head:7000"},
                     {"CHORUS_NODE_ADDRESS", "nodeB"},
                     {"RANK", "3"},
                     {"WORLD_SIZE", "4"},
                     {"LOCAL_RANK", "0"},
                     {"LOCAL_WORLD_SIZE", "1"},
                     {"MASTER_ADDR", "head"},
                     {"MASTER_PORT", "29500"}}));

  const char* base[] = {"PATH=/bin", "CHORUS_RANK=9", "HOME=/h", "CHORUS_RANKS=x", nullptr};
  EXPECT_EQ(merged_environment(base, {{"CHORUS_RANK", "1"}, {"CHORUS_SECRET", "s"}}),
            (std::vector<std::string>{"PATH=/bin", "HOME=/h", "CHORUS_RANKS=x", "CHORUS_RANK=1", "CHORUS_SECRET=s"}));
}

// What /bin/sh makes of `word`: each word printed on a line of its own.
std::string through_sh(const std::string& words) {
  auto child = testkit::spawn("/bin/sh", {"-c", "printf '%s|' " + words}, testkit::Output::pipe);
  if (child.pid < 0) return "(no sh)";
  std::string out = testkit::read_all(child.out, Clock::now() + 10s);
  testkit::wait_or_kill(child.pid, 10000ms);
  return out;
}

TEST(ChorusRunSsh, QuotesEveryWordForSh) {
  EXPECT_EQ(shell_quote("plain"), "'plain'");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(shell_quote(""), "''");
  for (const std::string word : {"plain", "two words", "it's", "$HOME", "`id`", "*", "a\"b", "back\\slash", "semi;colon",
                                 "new\nline", "", "''", "-n"})
    EXPECT_EQ(through_sh(shell_quote(word)), word + "|") << word;
}

TEST(ChorusRunSsh, BuildsTheRemoteCommand) {
  EXPECT_EQ(ssh_program(nullptr), (std::vector<std::string>{"ssh"}));
  EXPECT_EQ(ssh_program(""), (std::vector<std::string>{"ssh"}));
  EXPECT_EQ(ssh_program(" /usr/bin/ssh  -p 2222 "), (std::vector<std::string>{"/usr/bin/ssh", "-p", "2222"}));

  const std::string script = remote_script("/work dir", {{"CHORUS_RANK", "1"}}, "./prog", {"a b", "it's"});
  EXPECT_EQ(script,
            "cd '/work dir' || exit 127; IFS= read -r CHORUS_SECRET || exit 127; export CHORUS_SECRET; "
            "exec 3<&0 </dev/null; me=$$; "
            "(while IFS= read -r sig; do kill -s \"$sig\" \"$me\"; done; kill -s TERM \"$me\") <&3 >/dev/null 2>&1 & "
            "exec 3<&-; exec env 'CHORUS_RANK=1' './prog' 'a b' 'it'\\''s'");
  EXPECT_EQ(ssh_argv({"ssh", "-p", "2222"}, "nodeA", "echo 'x'"),
            (std::vector<std::string>{"ssh", "-p", "2222", "-o", "BatchMode=yes", "nodeA", "sh -c 'echo '\\''x'\\'''"}));
  EXPECT_EQ(signal_line(SIGTERM), "TERM\n");
  EXPECT_EQ(signal_line(SIGUSR2), "USR2\n");
  EXPECT_EQ(signal_line(SIGKILL), "KILL\n");
  EXPECT_EQ(signal_line(SIGSEGV), "");
}

TEST(ChorusRunOutput, TagsWholeLines) {
  LineTagger t(3);
  EXPECT_EQ(t.feed("hel"), "");
  EXPECT_EQ(t.feed("lo\nwor"), "[3] hello\n");
  EXPECT_EQ(t.feed("ld\n\nlast"), "[3] world\n[3] \n");
  EXPECT_EQ(t.finish(), "[3] last\n");
  EXPECT_EQ(t.finish(), "");
  // A line longer than kMaxLine goes out in pieces of kMaxLine, and its newline adds no empty line.
  LineTagger l(0);
  const std::string big(LineTagger::kMaxLine + 10, 'x');
  const std::string out = l.feed(big + "\nnext\n");
  EXPECT_TRUE(out == "[0] " + std::string(LineTagger::kMaxLine, 'x') + "\n[0] " + std::string(10, 'x') + "\n[0] next\n")
      << out.size() << " bytes";
  // A line of exactly kMaxLine whose newline comes in the next write is still one line.
  LineTagger exact(1);
  const std::string full(LineTagger::kMaxLine, 'y');
  EXPECT_EQ(exact.feed(full), "");
  EXPECT_TRUE(exact.feed("\n") == "[1] " + full + "\n");
  EXPECT_EQ(exact.feed("z\n"), "[1] z\n");
}

// ---------------------------------------------------------------------------------------------
// chorus-run as a process.

std::string chorus_run() { return testkit::sibling("chorus-run"); }

// A directory of its own for one test, removed at its end.
struct TempDir {
  std::string path;
  TempDir() {
    std::string tmpl = ::testing::TempDir() + "chorus-run-XXXXXX";
    if (mkdtemp(tmpl.data()) != nullptr) path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path.empty()) fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}
void write_file(const std::string& path, const std::string& text, mode_t mode = 0644) {
  std::ofstream(path, std::ios::binary) << text;
  chmod(path.c_str(), mode);
}
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}
bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Polls until every one of `paths` exists (the scripts write a file under another name and move
// it, so that one that exists is whole) or the deadline passes.
bool wait_for_files(const std::vector<std::string>& paths, std::chrono::milliseconds limit = 30s) {
  const auto deadline = Clock::now() + limit;
  for (;;) {
    if (std::all_of(paths.begin(), paths.end(), [](const std::string& p) { return fs::exists(p); })) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
}
std::vector<std::string> per_rank(const TempDir& dir, const std::string& stem, uint32_t n) {
  std::vector<std::string> paths;
  for (uint32_t r = 0; r < n; ++r) paths.push_back(dir / (stem + "." + std::to_string(r)));
  return paths;
}

// sh that writes `what` into DIR/STEM.$CHORUS_RANK, whole (written aside, then moved).
std::string record(const TempDir& dir, const std::string& stem, const std::string& what) {
  const std::string file = shell_quote(dir.path) + "/" + stem + ".$CHORUS_RANK";
  return what + " > " + file + ".tmp && mv " + file + ".tmp " + file + "; ";
}
// sh that waits (30 s at most) until DIR/NAME exists.
std::string await(const TempDir& dir, const std::string& name) {
  return "i=0; while [ ! -e " + shell_quote(dir / name) + " ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i+1)); done; ";
}

// One chorus-run, started from `cwd` with its stdout and stderr in files, and `env` added to the
// test's environment.
struct Launch {
  pid_t pid = -1;
  std::string out_path, err_path;
  Clock::time_point started;
};
Launch start(const TempDir& dir, const std::vector<std::string>& args, const std::vector<std::string>& env = {},
             const std::string& cwd = "") {
  Launch l;
  l.out_path = dir / "chorus-run.out";
  l.err_path = dir / "chorus-run.err";
  std::vector<std::string> sh{"-c", "cd \"$1\" && shift && exec \"$@\" >\"$CHORUS_RUN_TEST_OUT\" 2>\"$CHORUS_RUN_TEST_ERR\"",
                              "sh", cwd.empty() ? dir.path : cwd, chorus_run()};
  sh.insert(sh.end(), args.begin(), args.end());
  std::vector<std::string> vars{"CHORUS_RUN_TEST_OUT=" + l.out_path, "CHORUS_RUN_TEST_ERR=" + l.err_path};
  vars.insert(vars.end(), env.begin(), env.end());
  l.started = Clock::now();
  l.pid = testkit::spawn("/bin/sh", sh, testkit::Output::inherit, vars).pid;
  return l;
}

struct Finished {
  int status = -1;  // -1: it did not end in time (and was killed)
  std::string out, err;
  std::chrono::milliseconds took{0};
  bool exited_with(int code) const { return status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == code; }
  std::string why() const {
    return "chorus-run " + testkit::describe_status(status) + "\nstdout:\n" + out + "\nstderr:\n" + err;
  }
};
Finished finish(const Launch& l, std::chrono::milliseconds limit = 30s) {
  Finished f;
  f.status = testkit::wait_or_kill(l.pid, limit);
  f.took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - l.started);
  f.out = read_file(l.out_path);
  f.err = read_file(l.err_path);
  return f;
}
// Why a launch is given up on (it is killed and reaped, and its guard let go).
std::string give_up(const Launch& l, ChildGuard& guard) {
  guard.pid = -1;
  return finish(l, 1ms).why();
}
Finished run(const TempDir& dir, const std::vector<std::string>& args, const std::vector<std::string>& env = {},
             const std::string& cwd = "") {
  return finish(start(dir, args, env, cwd));
}

// A file of NAME=value lines.
// The orchestrator named by `address` (a rank's CHORUS_ORCHESTRATOR) is on `host` and takes
// connections.
void expect_orchestrator_at(const std::string& address, const std::string& host) {
  std::string h;
  uint16_t port = 0;
  ASSERT_TRUE(split_host_port(address, h, port)) << address;
  EXPECT_EQ(h, host);
  int fd = -1;
  const Status connected = tcp_connect(h, port, Clock::now() + 5s, fd);
  EXPECT_TRUE(connected) << connected.to_string();
  if (fd >= 0) close(fd);
}

std::map<std::string, std::string> read_env(const std::string& path) {
  std::map<std::string, std::string> vars;
  for (const auto& line : lines_of(read_file(path))) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) vars[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return vars;
}
const std::string kDumpEnv = "env | grep '^CHORUS_'";

bool alive(pid_t pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

// The variables chorus-run's own environment might carry into the tests from outside.
class ChorusRun : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path.empty()) << "no temporary directory";
    for (const char* v : {"CHORUS_SECRET", "CHORUS_PEERS", "CHORUS_JOIN_TIMEOUT_MS", "CHORUS_RUN_SSH"}) unsetenv(v);
  }
  TempDir dir_;
};

TEST_F(ChorusRun, HelpNamesEveryOptionAndVariable) {
  auto r = run(dir_, {"--help"});
  ASSERT_TRUE(r.exited_with(0)) << r.why();
  for (const char* word : {"-n N", "--peers", "--hosts", "--orchestrator-address", "--secret-file", "--join-timeout-ms",
                           "--tag-output", "--elastic", "--join-file", "--join F", "CHORUS_RANK", "CHORUS_WORLD_SIZE", "CHORUS_LOCAL_RANK",
                           "CHORUS_LOCAL_WORLD_SIZE", "CHORUS_ORCHESTRATOR", "CHORUS_SECRET", "CHORUS_NODE_ADDRESS",
                           "CHORUS_PEERS", "CHORUS_JOIN_TIMEOUT_MS", "CHORUS_RUN_SSH"})
    EXPECT_TRUE(contains(r.out, word)) << word << " is missing from --help:\n" << r.out;
}

TEST_F(ChorusRun, BadCommandLinesExitWithStatus2) {
  auto r = run(dir_, {"-n", "0", "/bin/true"});
  EXPECT_TRUE(r.exited_with(2)) << r.why();
  EXPECT_EQ(r.err, "chorus-run: bad -n 0 (1 to 65536)\n(see chorus-run --help)\n");
  r = run(dir_, {"-n", "2", "--bogus", "/bin/true"});
  EXPECT_TRUE(r.exited_with(2)) << r.why();
  EXPECT_EQ(r.err, "chorus-run: unknown option --bogus\n(see chorus-run --help)\n");
  r = run(dir_, {"-n", "3", "--hosts", "a:1,b:1", "/bin/true"});
  EXPECT_TRUE(r.exited_with(2)) << r.why();
  EXPECT_EQ(r.err, "chorus-run: --hosts has 2 slots for 3 processes\n(see chorus-run --help)\n");
}

// Four processes of two peers each: each finds its rank, the sizes, its peers, the node address,
// the secret (drawn by chorus-run, the same for all) and an orchestrator that takes connections,
// which lives as long as the processes.
TEST_F(ChorusRun, GivesEveryProcessItsEnvironment) {
  const std::string script = record(dir_, "env", kDumpEnv) + await(dir_, "go");
  auto l = start(dir_, {"-n", "4", "--peers", "2", "/bin/sh", "-c", script});
  ChildGuard guard{l.pid};
  ASSERT_TRUE(wait_for_files(per_rank(dir_, "env", 4))) << give_up(l, guard);
  std::set<std::string> secrets;
  std::string orchestrator;
  for (uint32_t r = 0; r < 4; ++r) {
    auto env = read_env(dir_ / ("env." + std::to_string(r)));
    EXPECT_EQ(env["CHORUS_RANK"], std::to_string(r));
    EXPECT_EQ(env["CHORUS_WORLD_SIZE"], "4");
    EXPECT_EQ(env["CHORUS_LOCAL_RANK"], std::to_string(r));
    EXPECT_EQ(env["CHORUS_LOCAL_WORLD_SIZE"], "4");
    EXPECT_EQ(env["CHORUS_PEERS"], "2");
    EXPECT_EQ(env["CHORUS_NODE_ADDRESS"], "127.0.0.1");
    EXPECT_EQ(env["CHORUS_JOIN_TIMEOUT_MS"], "60000");  // the orchestrator's admission, by default
    EXPECT_EQ(env["CHORUS_SECRET"].size(), 64u) << env["CHORUS_SECRET"];  // 32 random bytes in hex
    secrets.insert(env["CHORUS_SECRET"]);
    if (r == 0) orchestrator = env["CHORUS_ORCHESTRATOR"];
    EXPECT_EQ(env["CHORUS_ORCHESTRATOR"], orchestrator);
  }
  EXPECT_EQ(secrets.size(), 1u);
  expect_orchestrator_at(orchestrator, "127.0.0.1");

  write_file(dir_ / "go", "");
  auto f = finish(l);
  guard.pid = -1;
  EXPECT_TRUE(f.exited_with(0)) << f.why();
  EXPECT_EQ(f.err, "");
}

// Rank 2 exits with 3 while the others sleep: chorus-run ends them with SIGTERM at once (well
// within the grace), names the failure, and exits with 3.
TEST_F(ChorusRun, FirstFailureEndsTheOthersAndGivesItsStatus) {
  const std::string script = record(dir_, "pid", "echo $$") + "if [ \"$CHORUS_RANK\" = 2 ]; then " +
                             await(dir_, "pid.0") + await(dir_, "pid.1") + await(dir_, "pid.3") +
                             "exit 3; fi; exec sleep 60";
  auto l = start(dir_, {"-n", "4", "/bin/sh", "-c", script});
  ChildGuard guard{l.pid};
  ASSERT_TRUE(wait_for_files(per_rank(dir_, "pid", 4))) << give_up(l, guard);
  const auto all_started = Clock::now();
  auto f = finish(l);
  guard.pid = -1;
  const auto after_start = Clock::now() - all_started;
  EXPECT_TRUE(f.exited_with(3)) << f.why();
  EXPECT_EQ(f.err, "chorus-run: rank 2 (host localhost) exited with status 3; ending the other 3 processes\n");
  EXPECT_LT(after_start, kGrace - 1s) << "the others were not ended by SIGTERM";
  for (uint32_t r : {0u, 1u, 3u}) {
    const pid_t pid = std::stoi(read_file(dir_ / ("pid." + std::to_string(r))));
    EXPECT_FALSE(alive(pid)) << "rank " << r << " (pid " << pid << ") outlived chorus-run";
  }
}

// A process that ignores SIGTERM gets SIGKILL once the grace has passed.
TEST_F(ChorusRun, ProcessesThatIgnoreSigtermAreKilledAfterTheGrace) {
  const std::string script = "if [ \"$CHORUS_RANK\" = 1 ]; then " + await(dir_, "pid.0") + "exit 5; fi; trap '' TERM; " +
                             record(dir_, "pid", "echo $$") + "exec sleep 60";
  auto l = start(dir_, {"-n", "2", "/bin/sh", "-c", script});
  ChildGuard guard{l.pid};
  ASSERT_TRUE(wait_for_files({dir_ / "pid.0"})) << give_up(l, guard);
  const auto rank0_ready = Clock::now();
  auto f = finish(l);
  guard.pid = -1;
  const auto took = Clock::now() - rank0_ready;
  EXPECT_TRUE(f.exited_with(5)) << f.why();
  EXPECT_EQ(f.err, "chorus-run: rank 1 (host localhost) exited with status 5; ending the other 1 process\n");
  EXPECT_GE(took, kGrace - 1s);
  EXPECT_LT(took, kGrace + 10s);
  const pid_t pid = std::stoi(read_file(dir_ / "pid.0"));
  EXPECT_FALSE(alive(pid)) << "rank 0 (pid " << pid << ") outlived chorus-run";
}

// --elastic: rank 1 is killed (SIGKILL) once the others run; they are not ended, and chorus-run
// exits with 0 when they do. Every process has CHORUS_ELASTIC=1, and the join file names the
// orchestrator's port and the secret, for this user only, until chorus-run ends.
TEST_F(ChorusRun, ElasticJobsOutliveAKilledRank) {
  const std::string join = dir_ / "job.join";
  const std::string script = record(dir_, "env", kDumpEnv) + "if [ \"$CHORUS_RANK\" = 1 ]; then " +
                             await(dir_, "env.0") + await(dir_, "env.2") + "kill -KILL $$; fi; " + await(dir_, "go");
  auto l = start(dir_, {"-n", "3", "--elastic", "--join-file", join, "/bin/sh", "-c", script});
  ChildGuard guard{l.pid};
  ASSERT_TRUE(wait_for_files(per_rank(dir_, "env", 3))) << give_up(l, guard);
  for (uint32_t r = 0; r < 3; ++r) EXPECT_EQ(read_env(dir_ / ("env." + std::to_string(r)))["CHORUS_ELASTIC"], "1");
  struct stat st {};
  ASSERT_EQ(stat(join.c_str(), &st), 0) << "no join file";
  EXPECT_EQ(st.st_mode & 077, 0u) << "the join file is open to others";
  EXPECT_TRUE(contains(read_file(join), read_env(dir_ / "env.0")["CHORUS_SECRET"]));
  EXPECT_TRUE(contains(read_file(join), "\nhost 127.0.0.1\n")) << "the join file names where the job is reached";
  write_file(dir_ / "go", "");
  auto f = finish(l);
  guard.pid = -1;
  EXPECT_TRUE(f.exited_with(0)) << f.why();
  EXPECT_TRUE(contains(f.err, "chorus-run: rank 1 (host localhost) was killed by signal 9")) << f.err;
  EXPECT_TRUE(contains(f.err, "the elastic job goes on with the others")) << f.err;
  EXPECT_NE(stat(join.c_str(), &st), 0) << "the join file outlived the job";
}

TEST_F(ChorusRun, AProcessKilledBySignalGives128PlusTheSignal) {
  const std::string script = "if [ \"$CHORUS_RANK\" = 1 ]; then " + await(dir_, "pid.0") + "kill -KILL $$; fi; " +
                             record(dir_, "pid", "echo $$") + "exec sleep 60";
  auto f = run(dir_, {"-n", "2", "/bin/sh", "-c", script});
  EXPECT_TRUE(f.exited_with(128 + SIGKILL)) << f.why();
  EXPECT_EQ(f.err, "chorus-run: rank 1 (host localhost) was killed by signal 9 (" + std::string(strsignal(SIGKILL)) +
                       "); ending the other 1 process\n");
  const pid_t pid = std::stoi(read_file(dir_ / "pid.0"));
  EXPECT_FALSE(alive(pid)) << "rank 0 (pid " << pid << ") outlived chorus-run";
}

// SIGTERM, SIGINT and SIGUSR1 sent to chorus-run reach every process: each traps it, says so in a
// file and exits with 0, and so does chorus-run.
TEST_F(ChorusRun, ForwardsSignalsToEveryProcess) {
  // Run in the background of a shell, this test inherits SIGINT and SIGQUIT ignored, which
  // chorus-run and its processes would inherit too (sh cannot trap a signal ignored on entry).
  signal(SIGINT, SIG_DFL);
  signal(SIGQUIT, SIG_DFL);
  for (const auto& [sig, name] : std::vector<std::pair<int, std::string>>{{SIGTERM, "TERM"}, {SIGINT, "INT"}, {SIGUSR1, "USR1"}}) {
    SCOPED_TRACE(name);
    TempDir dir;
    const std::string script = "trap 'kill $s; " + record(dir, "got", "echo " + name) + "exit 0' " + name +
                               "; sleep 30 & s=$!; " + record(dir, "ready", "echo") + "wait $s; exit 7";
    auto l = start(dir, {"-n", "3", "/bin/sh", "-c", script});
    ChildGuard guard{l.pid};
    ASSERT_TRUE(wait_for_files(per_rank(dir, "ready", 3))) << give_up(l, guard);
    kill(l.pid, sig);
    auto f = finish(l);
    guard.pid = -1;
    EXPECT_TRUE(f.exited_with(0)) << f.why();
    for (uint32_t r = 0; r < 3; ++r) EXPECT_EQ(read_file(dir / ("got." + std::to_string(r))), name + "\n") << r;
  }
}

// --tag-output: each line of each process's stdout and stderr comes out whole on chorus-run's
// stdout and stderr, after "[RANK] ", in the process's order; a line written in two parts is one
// line, and a last line without newline comes out at the end.
TEST_F(ChorusRun, TagsEachLineWithItsRank) {
  constexpr int kLines = 200;
  const std::string script = "i=0; while [ $i -lt " + std::to_string(kLines) +
                             " ]; do echo \"rank $CHORUS_RANK line $i out\"; echo \"rank $CHORUS_RANK line $i err\" >&2;"
                             " i=$((i+1)); done; printf 'half ' >&2; printf 'and half %s\\n' $CHORUS_RANK >&2;"
                             " printf 'no newline %s' $CHORUS_RANK";
  auto f = run(dir_, {"-n", "3", "--tag-output", "/bin/sh", "-c", script});
  ASSERT_TRUE(f.exited_with(0)) << f.why();
  for (const auto& [text, stream] : {std::pair{f.out, std::string("out")}, std::pair{f.err, std::string("err")}}) {
    std::map<int, std::vector<std::string>> by_rank;
    for (const auto& line : lines_of(text)) {
      ASSERT_GE(line.size(), 4u) << line;
      ASSERT_EQ(line[0], '[') << line;
      const int rank = line[1] - '0';
      ASSERT_EQ(line.substr(2, 2), "] ") << line;
      by_rank[rank].push_back(line.substr(4));
    }
    ASSERT_EQ(by_rank.size(), 3u) << text;
    for (const auto& [rank, lines] : by_rank) {
      std::vector<std::string> want;
      for (int i = 0; i < kLines; ++i)
        want.push_back("rank " + std::to_string(rank) + " line " + std::to_string(i) + " " + stream);
      want.push_back(stream == "out" ? "no newline " + std::to_string(rank) : "half and half " + std::to_string(rank));
      EXPECT_EQ(lines, want) << "rank " << rank << " on std" << stream;
    }
  }
}

// A stand-in for ssh: records its arguments (NUL-separated) and the first line of its standard
// input, then runs the remote command here, as sshd would (the login shell with -c), from / so
// that the command's own cd counts, with that first line put back in front of the rest.
std::string write_fake_ssh(const TempDir& dir) {
  const std::string path = dir / "fake-ssh";
  write_file(path,
             "#!/bin/bash\n"
             "d=" + shell_quote(dir.path) + "\n"
             "printf '%s\\0' \"$@\" > \"$d/ssh-argv.$$\"\n"
             "IFS= read -r first\n"
             "printf '%s\\n' \"$first\" > \"$d/ssh-stdin.$$\"\n"
             "cd /\n"
             "exec /bin/sh -c \"${@: -1}\" < <(printf '%s\\n' \"$first\"; exec cat)\n",
             0755);
  return path;
}
std::vector<std::string> files_starting(const TempDir& dir, const std::string& prefix) {
  std::vector<std::string> paths;
  for (const auto& e : fs::directory_iterator(dir.path))
    if (e.path().filename().string().rfind(prefix, 0) == 0) paths.push_back(e.path().string());
  std::sort(paths.begin(), paths.end());
  return paths;
}
std::vector<std::string> split_nul(const std::string& text) {
  std::vector<std::string> words;
  std::size_t from = 0;
  for (std::size_t at; (at = text.find('\0', from)) != std::string::npos; from = at + 1)
    words.push_back(text.substr(from, at - from));
  return words;
}

// Ranks on localhost, nodeA (2 slots) and nodeB through the fake ssh: each rank on its host, the
// remote ones started by ssh -o BatchMode=yes HOST with the secret on ssh's input and in no
// argument, in chorus-run's working directory, with their arguments intact; the orchestrator
// named by this machine's name.
TEST_F(ChorusRun, StartsRemoteProcessesThroughSsh) {
  const std::string ssh = write_fake_ssh(dir_);
  const std::string secret = "s3cr3t with 'quotes' and $dollar";
  write_file(dir_ / "secret", secret + "\n", 0600);
  fs::create_directory(dir_ / "work dir");
  const std::string script = record(dir_, "env", kDumpEnv) + record(dir_, "pwd", "pwd -P") +
                             record(dir_, "args", "printf '%s\\0' \"$@\"");
  auto f = run(dir_,
               {"-n", "4", "--hosts", "localhost:1,nodeA:2,nodeB:1,nodeC:5", "--secret-file", dir_ / "secret",
                "--join-timeout-ms", "4000", "/bin/sh", "-c", script, "zero", "two words", "it's", "$HOME", "*"},
               {"CHORUS_RUN_SSH=" + ssh}, dir_ / "work dir");
  ASSERT_TRUE(f.exited_with(0)) << f.why();

  const std::string hostname = this_hostname();
  const std::string work = fs::canonical(dir_ / "work dir").string();
  struct Want {
    std::string node_address, local_rank, local_world_size;
  };
  const Want want[] = {{hostname, "0", "1"}, {"nodeA", "0", "2"}, {"nodeA", "1", "2"}, {"nodeB", "0", "1"}};
  for (uint32_t r = 0; r < 4; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    auto env = read_env(dir_ / ("env." + std::to_string(r)));
    EXPECT_EQ(env["CHORUS_RANK"], std::to_string(r));
    EXPECT_EQ(env["CHORUS_WORLD_SIZE"], "4");
    EXPECT_EQ(env["CHORUS_NODE_ADDRESS"], want[r].node_address);
    EXPECT_EQ(env["CHORUS_LOCAL_RANK"], want[r].local_rank);
    EXPECT_EQ(env["CHORUS_LOCAL_WORLD_SIZE"], want[r].local_world_size);
    EXPECT_EQ(env["CHORUS_JOIN_TIMEOUT_MS"], "4000");
    EXPECT_EQ(env["CHORUS_SECRET"], secret);
    EXPECT_EQ(env["CHORUS_ORCHESTRATOR"].rfind(hostname + ":", 0), 0u) << env["CHORUS_ORCHESTRATOR"];
    EXPECT_EQ(read_file(dir_ / ("pwd." + std::to_string(r))), work + "\n");
    EXPECT_EQ(split_nul(read_file(dir_ / ("args." + std::to_string(r)))),
              (std::vector<std::string>{"two words", "it's", "$HOME", "*"}));
  }

  // Three ssh runs: nodeA twice, nodeB once (nodeC has no rank); the secret on their input only.
  std::multiset<std::string> hosts;
  for (const auto& path : files_starting(dir_, "ssh-argv.")) {
    const std::string raw = read_file(path);
    EXPECT_FALSE(contains(raw, "s3cr3t")) << "the secret is in ssh's arguments";
    const auto argv = split_nul(raw);
    ASSERT_EQ(argv.size(), 4u) << raw;
    EXPECT_EQ(argv[0], "-o");
    EXPECT_EQ(argv[1], "BatchMode=yes");
    hosts.insert(argv[2]);
    EXPECT_EQ(argv[3].rfind("sh -c '", 0), 0u) << argv[3];
  }
  EXPECT_EQ(hosts, (std::multiset<std::string>{"nodeA", "nodeA", "nodeB"}));
  const auto inputs = files_starting(dir_, "ssh-stdin.");
  EXPECT_EQ(inputs.size(), 3u);
  for (const auto& path : inputs) EXPECT_EQ(read_file(path), secret + "\n");
}

// --orchestrator-address names this machine for every process (the local ones' node address
// too), and the orchestrator listens where it can be reached.
TEST_F(ChorusRun, OrchestratorAddressNamesThisMachine) {
  const std::string ssh = write_fake_ssh(dir_);
  const std::string script = record(dir_, "env", kDumpEnv) + await(dir_, "go");
  auto l = start(dir_, {"-n", "2", "--hosts", "localhost,nodeA", "--orchestrator-address", "127.0.0.1", "/bin/sh", "-c", script},
                 {"CHORUS_RUN_SSH=" + ssh});
  ChildGuard guard{l.pid};
  ASSERT_TRUE(wait_for_files(per_rank(dir_, "env", 2))) << give_up(l, guard);
  auto local = read_env(dir_ / "env.0");
  auto remote = read_env(dir_ / "env.1");
  EXPECT_EQ(local["CHORUS_NODE_ADDRESS"], "127.0.0.1");
  EXPECT_EQ(remote["CHORUS_NODE_ADDRESS"], "nodeA");
  EXPECT_EQ(local["CHORUS_ORCHESTRATOR"], remote["CHORUS_ORCHESTRATOR"]);
  expect_orchestrator_at(local["CHORUS_ORCHESTRATOR"], "127.0.0.1");
  write_file(dir_ / "go", "");
  auto f = finish(l);
  guard.pid = -1;
  EXPECT_TRUE(f.exited_with(0)) << f.why();
}

// chorus-run --join with --hosts: newcomers here and on other hosts, with the orchestrator where
// the job's join file says other hosts reach it (the job's --orchestrator-address), the newcomers
// here named as the job's own processes here are, the remote ones by their host, the secret on
// ssh's input only, and CHORUS_JOIN=1 for each.
TEST_F(ChorusRun, JoinsNewcomersOnOtherHosts) {
  const std::string ssh = write_fake_ssh(dir_);
  const std::string join = dir_ / "jobdir/job.join";
  const std::string secret = "j0in s3cret";
  ASSERT_TRUE(write_rendezvous(join, {4711, secret, "head.example.org"}).is_ok());  // as a job's chorus-run does
  const std::string script = record(dir_, "env", kDumpEnv);
  auto f = run(dir_, {"--join", join, "-n", "3", "--hosts", "localhost,nodeA:2", "/bin/sh", "-c", script},
               {"CHORUS_RUN_SSH=" + ssh});
  ASSERT_TRUE(f.exited_with(0)) << f.why();
  const std::string want_node[] = {"head.example.org", "nodeA", "nodeA"};
  for (uint32_t r = 0; r < 3; ++r) {
    SCOPED_TRACE("newcomer " + std::to_string(r));
    auto env = read_env(dir_ / ("env." + std::to_string(r)));
    EXPECT_EQ(env["CHORUS_ORCHESTRATOR"], "head.example.org:4711");
    EXPECT_EQ(env["CHORUS_NODE_ADDRESS"], want_node[r]);
    EXPECT_EQ(env["CHORUS_JOIN"], "1");
    EXPECT_EQ(env["CHORUS_ELASTIC"], "1");
    EXPECT_EQ(env["CHORUS_SECRET"], secret);
  }
  const auto argvs = files_starting(dir_, "ssh-argv.");
  ASSERT_EQ(argvs.size(), 2u);
  for (const auto& path : argvs) {
    const std::string raw = read_file(path);
    EXPECT_FALSE(contains(raw, "s3cret")) << "the secret is in ssh's arguments";
    EXPECT_EQ(split_nul(raw).at(2), "nodeA");
  }
  const auto inputs = files_starting(dir_, "ssh-stdin.");
  EXPECT_EQ(inputs.size(), 2u);
  for (const auto& path : inputs) EXPECT_EQ(read_file(path), secret + "\n");
}

// An elastic job with a host elsewhere names this machine in its join file, as its processes reach
// the orchestrator, and says that newcomers may go on other hosts.
TEST_F(ChorusRun, AnElasticJobsJoinFileNamesWhereItIsReached) {
  const std::string ssh = write_fake_ssh(dir_);
  const std::string join = dir_ / "jobdir/job.join";
  const std::string script = record(dir_, "env", kDumpEnv) + await(dir_, "go");
  auto l = start(dir_, {"-n", "2", "--elastic", "--join-file", join, "--hosts", "localhost,nodeA", "/bin/sh", "-c", script},
                 {"CHORUS_RUN_SSH=" + ssh});
  ChildGuard guard{l.pid};
  ASSERT_TRUE(wait_for_files(per_rank(dir_, "env", 2))) << give_up(l, guard);
  auto r = read_rendezvous(join, Clock::now() + 5s);
  ASSERT_TRUE(r) << r.status().to_string();
  const auto env = read_env(dir_ / "env.0");
  EXPECT_EQ(r->host, this_hostname());
  EXPECT_EQ(host_port(r->host, r->port), env.at("CHORUS_ORCHESTRATOR"));
  EXPECT_EQ(r->secret, env.at("CHORUS_SECRET"));
  write_file(dir_ / "go", "");
  auto f = finish(l);
  guard.pid = -1;
  EXPECT_TRUE(f.exited_with(0)) << f.why();
  EXPECT_TRUE(contains(f.err, "newcomers join with: chorus-run --join " + join + " -n K [--hosts H1,H2,...] /bin/sh")) << f.err;
}

// A job reached on loopback only (all its processes here, no --orchestrator-address) cannot take
// newcomers from other hosts: chorus-run --join says so, starting nothing.
TEST_F(ChorusRun, RefusesNewcomersOnOtherHostsForALoopbackJob) {
  const std::string ssh = write_fake_ssh(dir_);
  const std::string join = dir_ / "jobdir/job.join";
  ASSERT_TRUE(write_rendezvous(join, {4712, "s", "localhost"}).is_ok());  // a job named by a loopback name
  auto f = run(dir_, {"--join", join, "-n", "2", "--hosts", "localhost,nodeB", "/bin/sh", "-c", record(dir_, "env", kDumpEnv)},
               {"CHORUS_RUN_SSH=" + ssh});
  EXPECT_TRUE(f.exited_with(2)) << f.why();
  EXPECT_TRUE(contains(f.err, "is reached on loopback only (localhost), so newcomers on nodeB cannot join it: start "
                              "the elastic job with --hosts naming another host, or with --orchestrator-address")) << f.err;
  EXPECT_TRUE(files_starting(dir_, "ssh-argv.").empty());
  EXPECT_TRUE(files_starting(dir_, "env.").empty());
}

// Remote processes are signalled through their ssh's input: a forwarded SIGUSR1 reaches both,
// and when one fails the other gets SIGTERM.
TEST_F(ChorusRun, SignalsReachRemoteProcesses) {
  const std::string ssh = write_fake_ssh(dir_);
  // The traps do what follows (a trapped signal may come before `wait` starts, which then waits
  // on): on USR1 rank 0 fails once rank 1 has it too, and rank 1 waits to be ended.
  const std::string script = "trap '" + record(dir_, "usr1", "echo USR1") + "if [ \"$CHORUS_RANK\" = 0 ]; then " +
                             await(dir_, "usr1.1") + "kill $s; exit 4; fi' USR1; trap 'kill $s; " +
                             record(dir_, "term", "echo TERM") + "exit 0' TERM; sleep 30 & s=$!; " +
                             record(dir_, "ready", "echo") + "wait $s; wait $s; exit 9";
  auto l = start(dir_, {"-n", "2", "--hosts", "nodeA,nodeB", "/bin/sh", "-c", script}, {"CHORUS_RUN_SSH=" + ssh});
  ChildGuard guard{l.pid};
  ASSERT_TRUE(wait_for_files(per_rank(dir_, "ready", 2))) << give_up(l, guard);
  kill(l.pid, SIGUSR1);
  auto f = finish(l);
  guard.pid = -1;
  EXPECT_TRUE(f.exited_with(4)) << f.why();
  EXPECT_EQ(f.err, "chorus-run: rank 0 (host nodeA) exited with status 4; ending the other 1 process\n");
  EXPECT_EQ(read_file(dir_ / "usr1.0"), "USR1\n");
  EXPECT_EQ(read_file(dir_ / "usr1.1"), "USR1\n");
  EXPECT_EQ(read_file(dir_ / "term.1"), "TERM\n");
}

// The secret: --secret-file's first line wins over CHORUS_SECRET, which wins over a drawn one; a
// secret file that cannot be read, or starts with an empty line, starts nothing and exits with 2.
TEST_F(ChorusRun, TakesTheSecretFromAFileOrTheEnvironment) {
  const std::string script = record(dir_, "env", kDumpEnv);
  write_file(dir_ / "secret", "from-file\nsecond line\n", 0600);
  auto f = run(dir_, {"-n", "2", "--secret-file", dir_ / "secret", "/bin/sh", "-c", script}, {"CHORUS_SECRET=from-env"});
  ASSERT_TRUE(f.exited_with(0)) << f.why();
  for (uint32_t r = 0; r < 2; ++r) EXPECT_EQ(read_env(dir_ / ("env." + std::to_string(r)))["CHORUS_SECRET"], "from-file");

  f = run(dir_, {"-n", "2", "/bin/sh", "-c", script}, {"CHORUS_SECRET=from-env"});
  ASSERT_TRUE(f.exited_with(0)) << f.why();
  for (uint32_t r = 0; r < 2; ++r) EXPECT_EQ(read_env(dir_ / ("env." + std::to_string(r)))["CHORUS_SECRET"], "from-env");

  for (uint32_t r = 0; r < 2; ++r) fs::remove(dir_ / ("env." + std::to_string(r)));
  const std::string missing = dir_ / "no-such-secret";
  f = run(dir_, {"-n", "2", "--secret-file", missing, "/bin/sh", "-c", script});
  EXPECT_TRUE(f.exited_with(2)) << f.why();
  EXPECT_EQ(f.err, "chorus-run: cannot read the secret from " + missing + "\n");
  write_file(dir_ / "empty-secret", "\nsecond\n", 0600);
  f = run(dir_, {"-n", "2", "--secret-file", dir_ / "empty-secret", "/bin/sh", "-c", script});
  EXPECT_TRUE(f.exited_with(2)) << f.why();
  EXPECT_EQ(f.err, "chorus-run: the secret file " + (dir_ / "empty-secret") + " starts with an empty line\n");
  EXPECT_FALSE(fs::exists(dir_ / "env.0")) << "a process started without a secret";
}

// A program that cannot be run: exit status 127 and why, before anything starts.
TEST_F(ChorusRun, AProgramThatCannotRunGives127) {
  auto f = run(dir_, {"-n", "2", "no-such-program-for-chorus-run"});
  EXPECT_TRUE(f.exited_with(127)) << f.why();
  EXPECT_EQ(f.err, "chorus-run: cannot run no-such-program-for-chorus-run: No such file or directory\n");
  f = run(dir_, {"-n", "2", "./missing", "arg"});
  EXPECT_TRUE(f.exited_with(127)) << f.why();
  EXPECT_EQ(f.err, "chorus-run: cannot run ./missing: No such file or directory\n");
  write_file(dir_ / "not-executable", "#!/bin/sh\nexit 0\n", 0644);
  f = run(dir_, {"-n", "1", "./not-executable"});
  EXPECT_TRUE(f.exited_with(127)) << f.why();
  EXPECT_EQ(f.err, "chorus-run: cannot run ./not-executable: Permission denied\n");
  // The ssh program too, for remote hosts.
  f = run(dir_, {"-n", "1", "--hosts", "nodeA", "/bin/true"}, {"CHORUS_RUN_SSH=/no/such/ssh"});
  EXPECT_TRUE(f.exited_with(127)) << f.why();
  EXPECT_EQ(f.err, "chorus-run: cannot run /no/such/ssh: No such file or directory\n");
}

// A program that fails at exec itself (a file that is executable but no program): the exec's own
// error, told back by the child.
TEST_F(ChorusRun, AnExecThatFailsIsReported) {
  write_file(dir_ / "garbage", std::string("\x7f" "ELF garbage", 12), 0755);
  auto f = run(dir_, {"-n", "2", "./garbage"});
  EXPECT_TRUE(f.exited_with(127)) << f.why();
  EXPECT_EQ(f.err, "chorus-run: cannot run ./garbage: Exec format error\n");
}

} // namespace
} // namespace chorus::launch
