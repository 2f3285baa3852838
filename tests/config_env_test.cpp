// Config::from_env (core/config_env.cpp): each launcher's variables set as that launcher sets them,
// which numbering wins when several are set, where the orchestrator is found, and the errors that
// name a variable.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <string>

#include <unistd.h>

#include <chorus/config.hpp>
#include "core/launch_env.hpp"
#include "status_matchers.hpp"

namespace chorus {
namespace {

using namespace std::chrono_literals;

// Every variable from_env reads is unset for the test and put back after it.
class Env : public ::testing::Test {
 protected:
  static constexpr const char* kAll[] = {
      "CHORUS_RANK", "CHORUS_WORLD_SIZE", "CHORUS_LOCAL_RANK", "CHORUS_LOCAL_WORLD_SIZE", "CHORUS_PEERS",
      "CHORUS_ORCHESTRATOR", "CHORUS_SECRET", "CHORUS_SECRET_FILE", "CHORUS_NODE_ADDRESS", "CHORUS_TIMEOUT_MS",
      "CHORUS_JOIN_TIMEOUT_MS", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
      "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
      "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_MCA_ess_base_jobid", "PMI_RANK",
      "PMI_SIZE", "MPI_LOCALNRANKS", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_STEP_NUM_NODES",
      "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_RESTART_COUNT", "OMPI_MCA_orte_hnp_uri", "XDG_RUNTIME_DIR", "TMPDIR",
      "CHORUS_ELASTIC", "CHORUS_JOIN", "CHORUS_SEAL_DATA", "SLURM_SRUN_COMM_PORT", "SLURM_STEP_LAUNCHER_PORT"};
  void SetUp() override {
    for (const char* v : kAll) {
      if (const char* was = std::getenv(v)) saved_[v] = was;
      ::unsetenv(v);
    }
  }
  void TearDown() override {
    for (const char* v : kAll) ::unsetenv(v);
    for (const auto& [k, v] : saved_) ::setenv(k.c_str(), v.c_str(), 1);
  }
  static void set(std::map<std::string, std::string> vars) {
    for (const auto& [k, v] : vars) ::setenv(k.c_str(), v.c_str(), 1);
  }
  std::map<std::string, std::string> saved_;
};

TEST_F(Env, NoLauncherIsOneProcess) {
  auto c = Config::from_env();
  ASSERT_TRUE(c) << c.status().to_string();
  EXPECT_EQ(c->num_nodes, 0u);
  EXPECT_EQ(c->num_devices, 1u);
  EXPECT_EQ(c->rank, -1);
  set({{"CHORUS_PEERS", "4"}, {"CHORUS_TIMEOUT_MS", "1500"}});
  c = Config::from_env();
  ASSERT_TRUE(c) << c.status().to_string();
  EXPECT_EQ(c->num_devices, 4u);
  EXPECT_EQ(c->timeout, 1500ms);
  EXPECT_TRUE(c->validate().is_ok());
  set({{"WORLD_SIZE", "1"}, {"RANK", "0"}});  // a launcher's world of one: still one process
  c = Config::from_env();
  ASSERT_TRUE(c) << c.status().to_string();
  EXPECT_EQ(c->num_nodes, 0u);
}

TEST_F(Env, ChorusRunsVariables) {
  set({{"CHORUS_RANK", "2"}, {"CHORUS_WORLD_SIZE", "4"}, {"CHORUS_LOCAL_RANK", "2"}, {"CHORUS_LOCAL_WORLD_SIZE", "4"},
       {"CHORUS_PEERS", "2"}, {"CHORUS_ORCHESTRATOR", "127.0.0.1:4100"}, {"CHORUS_SECRET", "s3"},
       {"CHORUS_NODE_ADDRESS", "127.0.0.1"}, {"CHORUS_JOIN_TIMEOUT_MS", "9000"}});
  auto c = Config::from_env();
  ASSERT_TRUE(c) << c.status().to_string();
  EXPECT_EQ(c->num_nodes, 4u);
  EXPECT_EQ(c->rank, 2);
  EXPECT_EQ(c->num_devices, 2u);
  EXPECT_EQ(c->orchestrator_address, "127.0.0.1:4100");
  EXPECT_EQ(c->node_address, "127.0.0.1");
  EXPECT_EQ(c->secret, "s3");
  EXPECT_EQ(c->join_timeout, 9000ms);
  EXPECT_EQ(c->join_limit(), 9000ms);
  EXPECT_FALSE(c->host_orchestrator);  // chorus-run serves it
  EXPECT_TRUE(c->rendezvous_file.empty());
}

// chorus-run --elastic and --join (docs/elastic.md): the members' config says elastic; a newcomer
// names no rank (the orchestrator numbers it when the members grow), even alone.
TEST_F(Env, ElasticJobsAndTheirNewcomers) {
  set({{"CHORUS_RANK", "1"}, {"CHORUS_WORLD_SIZE", "3"}, {"CHORUS_ORCHESTRATOR", "127.0.0.1:4100"},
       {"CHORUS_SECRET", "s3"}, {"CHORUS_NODE_ADDRESS", "127.0.0.1"}, {"CHORUS_ELASTIC", "1"}});
  auto c = Config::from_env();
  ASSERT_TRUE(c) << c.status().to_string();
  EXPECT_TRUE(c->elastic);
  EXPECT_EQ(c->rank, 1);
  set({{"CHORUS_RANK", "0"}, {"CHORUS_WORLD_SIZE", "1"}, {"CHORUS_JOIN", "1"}});
  c = Config::from_env();
  ASSERT_TRUE(c) << c.status().to_string();
  EXPECT_TRUE(c->elastic);
  EXPECT_TRUE(c->newcomer);
  EXPECT_EQ(c->rank, -1);
  EXPECT_EQ(c->num_nodes, 1u);
  EXPECT_EQ(c->orchestrator_address, "127.0.0.1:4100");
  EXPECT_EQ(c->secret, "s3");
  ::unsetenv("CHORUS_ORCHESTRATOR");
  EXPECT_TRUE(has(Config::from_env().status(), Errc::invalid_config, {"CHORUS_JOIN=1 needs CHORUS_ORCHESTRATOR"}));
  set({{"CHORUS_ELASTIC", "2"}});
  EXPECT_TRUE(has(Config::from_env().status(), Errc::invalid_config, {"CHORUS_ELASTIC"}));
}

TEST_F(Env, SealDataFromTheEnvironment) {
  set({{"CHORUS_RANK", "1"}, {"CHORUS_WORLD_SIZE", "3"}, {"CHORUS_ORCHESTRATOR", "127.0.0.1:4100"},
       {"CHORUS_SECRET", "s3"}, {"CHORUS_NODE_ADDRESS", "127.0.0.1"}});
  auto c = Config::from_env();
  ASSERT_TRUE(c) << c.status().to_string();
  EXPECT_FALSE(c->seal_data);
  set({{"CHORUS_SEAL_DATA", "1"}});
  c = Config::from_env();
  ASSERT_TRUE(c) << c.status().to_string();
  EXPECT_TRUE(c->seal_data);
  set({{"CHORUS_SEAL_DATA", "yes"}});
  EXPECT_TRUE(has(Config::from_env().status(), Errc::invalid_config, {"CHORUS_SEAL_DATA"}));
}

// torchrun: rank 0 hosts the orchestrator at MASTER_ADDR, on the port after MASTER_PORT (which
// torch's own store holds); the node's address is the route to it, IPv4 first.
TEST_F(Env, TorchrunsVariables) {
  set({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"},
       {"MASTER_PORT", "29500"}});
  auto c = Config::from_env();
  ASSERT_TRUE(c) << c.status().to_string();
  EXPECT_EQ(c->num_nodes, 2u);
  EXPECT_EQ(c->rank, 0);
  EXPECT_EQ(c->orchestrator_address, "127.0.0.1:29501");
  EXPECT_TRUE(c->host_orchestrator);
  EXPECT_EQ(c->node_address, "127.0.0.1");
  set({{"RANK", "1"}, {"TORCHELASTIC_USE_AGENT_STORE", "True"}, {"MASTER_ADDR", "localhost"}});
  c = Config::from_env();
  ASSERT_TRUE(c) << c.status().to_string();
  EXPECT_EQ(c->orchestrator_address, "localhost:29501");
  EXPECT_FALSE(c->host_orchestrator);
  EXPECT_EQ(c->node_address, "127.0.0.1");  // not [::1], which the data plane could not listen on
  set({{"MASTER_PORT", "65535"}});
  EXPECT_TRUE(has(Config::from_env().status(), Errc::invalid_config, {"MASTER_PORT=65535"}));
}

// Open MPI on one host: no address, so rank 0 hosts and the ranks meet through a file named by
// the job, in a directory of this user's.
TEST_F(Env, OpenMpiOnOneHostMeetsThroughARendezvousFile) {
  set({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "3"},
       {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}, {"OMPI_MCA_ess_base_jobid", "596312065"}, {"TMPDIR", "/var/tmp"}});
  auto c = Config::from_env();
  ASSERT_TRUE(c) << c.status().to_string();
  EXPECT_EQ(c->num_nodes, 4u);
  EXPECT_EQ(c->rank, 3);
  const std::string dir = "/var/tmp/chorus-" + std::to_string(::getuid()) + "/ompi-596312065-";
  EXPECT_EQ(c->rendezvous_file.rfind(dir, 0), 0u) << c->rendezvous_file;
  EXPECT_EQ(c->rendezvous_file.size(), dir.size() + 16 + std::string(".rendezvous").size()) << c->rendezvous_file;
  EXPECT_TRUE(c->orchestrator_address.empty());
  EXPECT_FALSE(c->host_orchestrator);
  EXPECT_EQ(c->node_address, "127.0.0.1");
  // Two runs of mpirun whose job ids meet (a 16-bit hash of mpirun's pid) differ in mpirun's address.
  const std::string first = c->rendezvous_file;
  set({{"OMPI_MCA_orte_hnp_uri", "596312064.0;tcp://192.0.2.2:49601"}});
  c = Config::from_env();
  ASSERT_TRUE(c) << c.status().to_string();
  EXPECT_NE(c->rendezvous_file, first);
  // The session's runtime directory first, when it is there.
  set({{"OMPI_COMM_WORLD_RANK", "0"}, {"XDG_RUNTIME_DIR", "/tmp"}});
  c = Config::from_env();
  ASSERT_TRUE(c) << c.status().to_string();
  EXPECT_TRUE(c->host_orchestrator);
  EXPECT_EQ(c->rendezvous_file.rfind("/tmp/chorus/ompi-596312065-", 0), 0u) << c->rendezvous_file;
  set({{"XDG_RUNTIME_DIR", "/run/user/no-such-session"}});
  c = Config::from_env();
  ASSERT_TRUE(c) << c.status().to_string();
  EXPECT_EQ(c->rendezvous_file.rfind("/var/tmp/chorus-", 0), 0u) << c->rendezvous_file;
}

// The numbering and job key the Python package reads too (core/launch_env.hpp): a store file
// (which cannot say who wrote it) names the launching srun's ports; a job id that is not a plain
// file name part names nothing.
TEST_F(Env, TheJobKeyOfAStoreNamesTheLaunchingSrun) {
  set({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_NUM_NODES", "1"}, {"SLURM_JOB_ID", "77"},
       {"SLURM_STEP_ID", "3"}, {"SLURM_SRUN_COMM_PORT", "40001"}, {"SLURM_STEP_LAUNCHER_PORT", "40002"}});
  auto n = launch_numbering();
  ASSERT_TRUE(n) << n.status().to_string();
  ASSERT_NE(n->by, nullptr);
  EXPECT_STREQ(n->by->name, "Slurm");
  EXPECT_EQ(n->world, 2u);
  EXPECT_TRUE(n->one_host);
  EXPECT_EQ(launch_job_key(*n->by), "slurm-77.3.0");
  const std::string with_ports = launch_job_key(*n->by, true);
  EXPECT_EQ(with_ports.rfind("slurm-77.3.0-", 0), 0u) << with_ports;
  EXPECT_EQ(with_ports.size(), std::string("slurm-77.3.0-").size() + 16) << with_ports;
  set({{"SLURM_SRUN_COMM_PORT", "40003"}});  // another srun of the same step
  EXPECT_NE(launch_job_key(*n->by, true), with_ports);
  set({{"SLURM_JOB_ID", "../77"}});
  EXPECT_EQ(launch_job_key(*n->by), "") << "a job id that could climb out of the directory";
  set({{"SLURM_NTASKS", ""}});
  EXPECT_TRUE(has(launch_numbering().status(), Errc::invalid_config, {"SLURM_PROCID is set but SLURM_NTASKS is not"}));
}

TEST_F(Env, SlurmOnOneHostAndOnSeveral) {
  set({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "1"}, {"SLURM_STEP_NUM_NODES", "1"},
       {"SLURM_JOB_ID", "77"}, {"SLURM_STEP_ID", "3"}});
  auto c = Config::from_env();
  ASSERT_TRUE(c) << c.status().to_string();
  EXPECT_EQ(c->rank, 1);
  EXPECT_NE(c->rendezvous_file.find("/slurm-77.3.0.rendezvous"), std::string::npos) << c->rendezvous_file;
  set({{"SLURM_RESTART_COUNT", "2"}});  // requeued: the same job id, another run
  c = Config::from_env();
  ASSERT_TRUE(c) << c.status().to_string();
  EXPECT_NE(c->rendezvous_file.find("/slurm-77.3.2.rendezvous"), std::string::npos) << c->rendezvous_file;
  set({{"SLURM_STEP_NUM_NODES", "2"}});  // across hosts a file cannot serve: say what to set
  c = Config::from_env();
  EXPECT_TRUE(has(c.status(), Errc::invalid_config,
                  {"rank 1 of 2 (Slurm)", "no orchestrator address", "CHORUS_ORCHESTRATOR", "MASTER_ADDR",
                   "several hosts"}));
  set({{"CHORUS_ORCHESTRATOR", "127.0.0.1:4100"}});
  c = Config::from_env();
  ASSERT_TRUE(c) << c.status().to_string();
  EXPECT_EQ(c->orchestrator_address, "127.0.0.1:4100");
  EXPECT_EQ(c->node_address, "127.0.0.1");  // the route to a loopback orchestrator
}

// An sbatch script's own shell has Slurm's pair but no step: a program it runs alone is one
// process. Inside a step, Slurm's numbering wins over the PMI pair srun --mpi=pmi2 also sets.
TEST_F(Env, SlurmCountsInsideAStepOnly) {
  set({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_JOB_ID", "77"}});
  auto c = Config::from_env();
  ASSERT_TRUE(c) << c.status().to_string();
  EXPECT_EQ(c->num_nodes, 0u);
  set({{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "2"}, {"SLURM_STEP_NUM_NODES", "1"}, {"PMI_RANK", "2"}, {"PMI_SIZE", "4"}});
  c = Config::from_env();
  ASSERT_TRUE(c) << c.status().to_string();
  EXPECT_EQ(c->rank, 2);
  EXPECT_NE(c->rendezvous_file.find("/slurm-77.0.0.rendezvous"), std::string::npos) << c->rendezvous_file;
}

// A launcher started inside another's job sees both: the inner one's numbering wins.
TEST_F(Env, TheInnerLaunchersNumberingWins) {
  set({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
       {"CHORUS_ORCHESTRATOR", "127.0.0.1:4100"}});
  auto c = Config::from_env();
  ASSERT_TRUE(c) << c.status().to_string();
  EXPECT_EQ(c->rank, 1);
  EXPECT_EQ(c->num_nodes, 2u);
  set({{"RANK", "3"}, {"WORLD_SIZE", "5"}});
  c = Config::from_env();
  ASSERT_TRUE(c) << c.status().to_string();
  EXPECT_EQ(c->rank, 3);
  EXPECT_EQ(c->num_nodes, 5u);
}

TEST_F(Env, BadValuesNameTheVariable) {
  set({{"RANK", "1"}});
  EXPECT_TRUE(has(Config::from_env().status(), Errc::invalid_config, {"RANK is set but WORLD_SIZE is not"}));
  set({{"WORLD_SIZE", "two"}});
  EXPECT_TRUE(has(Config::from_env().status(), Errc::invalid_config, {"WORLD_SIZE='two'", "whole number"}));
  set({{"WORLD_SIZE", "2"}, {"RANK", "2"}});
  EXPECT_TRUE(has(Config::from_env().status(), Errc::invalid_config, {"RANK='2'", "from 0 to 1"}));
  set({{"RANK", "1"}, {"MASTER_ADDR", "127.0.0.1"}});
  EXPECT_TRUE(has(Config::from_env().status(), Errc::invalid_config, {"MASTER_PORT is not set"}));
  set({{"MASTER_PORT", "70000"}});
  EXPECT_TRUE(has(Config::from_env().status(), Errc::invalid_config, {"MASTER_PORT='70000'"}));
  ::unsetenv("RANK");
  ::unsetenv("WORLD_SIZE");
  set({{"CHORUS_PEERS", "0"}});
  EXPECT_TRUE(has(Config::from_env().status(), Errc::invalid_config, {"CHORUS_PEERS='0'"}));
}

TEST_F(Env, TheSecretComesFromAFileOrTheEnvironment) {
  char path[] = "/tmp/chorus-secret-XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::close(fd);
  std::ofstream(path) << "from-the-file\n";
  set({{"CHORUS_RANK", "0"}, {"CHORUS_WORLD_SIZE", "2"}, {"CHORUS_ORCHESTRATOR", "127.0.0.1:4100"},
       {"CHORUS_SECRET", "from-the-env"}});
  auto c = Config::from_env();
  ASSERT_TRUE(c) << c.status().to_string();
  EXPECT_EQ(c->secret, "from-the-env");
  set({{"CHORUS_SECRET_FILE", path}});
  c = Config::from_env();
  ASSERT_TRUE(c) << c.status().to_string();
  EXPECT_EQ(c->secret, "from-the-file");
  ::unlink(path);
  EXPECT_TRUE(has(Config::from_env().status(), Errc::invalid_config, {"CHORUS_SECRET_FILE", path}));
}

} // namespace
} // namespace chorus
