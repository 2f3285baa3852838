// The rendezvous file through which the ranks of one host find rank 0's orchestrator
// (transport/rendezvous_file.hpp): written whole, read back, waited for with a limit that names
// the file, and kept to a directory of this user's alone.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "status_matchers.hpp"
#include "transport/rendezvous_file.hpp"

namespace chorus {
namespace {

using namespace std::chrono_literals;

class RendezvousFile : public ::testing::Test {
 protected:
  void SetUp() override {
    char d[] = "/tmp/chorus-rv-XXXXXX";
    ASSERT_NE(::mkdtemp(d), nullptr);
    root_ = d;
    path_ = root_ + "/mine/job-1.rendezvous";
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  std::string root_, path_;
};

TEST_F(RendezvousFile, WrittenThenReadInAPrivateDirectory) {
  ASSERT_TRUE(write_rendezvous(path_, {4242, "c0ffee"}).is_ok());
  struct stat st {};
  ASSERT_EQ(::stat((root_ + "/mine").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(::stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto r = read_rendezvous(path_, Clock::now() + 1s);
  ASSERT_TRUE(r) << r.status().to_string();
  EXPECT_EQ(r->port, 4242);
  EXPECT_EQ(r->secret, "c0ffee");
}

// A process that has ended (reaped: its pid names nobody now).
long gone_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

// A file left by a rank 0 that is gone (killed before it could remove it) is not read: the reader
// waits, through it, for the file this job's rank 0 writes.
TEST_F(RendezvousFile, AGoneWritersFileIsWaitedThrough) {
  ASSERT_TRUE(write_rendezvous(path_, {1, "x"}).is_ok());  // makes the directory
  std::ofstream(path_) << "4999 " << gone_pid() << " 12345 old-secret\n";
  EXPECT_TRUE(has(read_rendezvous(path_, Clock::now() + 100ms).status(), Errc::timeout, {path_}));
  Result<Rendezvous> r = Status(Errc::internal, "not read");
  std::thread reader([&] { r = read_rendezvous(path_, Clock::now() + 20s); });
  ASSERT_TRUE(write_rendezvous(path_, {5001, "new-secret"}).is_ok());
  reader.join();
  ASSERT_TRUE(r) << r.status().to_string();
  EXPECT_EQ(r->port, 5001);
  EXPECT_EQ(r->secret, "new-secret");
}

// A secret may hold spaces: the rest of the line is the secret.
TEST_F(RendezvousFile, ASecretWithSpacesComesBackWhole) {
  ASSERT_TRUE(write_rendezvous(path_, {6001, "a b  c"}).is_ok());
  auto r = read_rendezvous(path_, Clock::now() + 1s);
  ASSERT_TRUE(r) << r.status().to_string();
  EXPECT_EQ(r->secret, "a b  c");
}

// chorus-run's join file names where the job's processes reach the orchestrator; a file that
// names none (a rank 0's) gives an empty host (loopback). Blanks at either end of a secret are the
// secret's, and so is a secret of blanks.
TEST_F(RendezvousFile, AHostAndASecretsBlanksComeBackAsWritten) {
  const Rendezvous cases[] = {{6002, "s e", "node7.example.org"}, {6003, "s"}, {6004, "  ", "h"}, {6005, " x "}};
  for (const Rendezvous& w : cases) {
    SCOPED_TRACE("port " + std::to_string(w.port));
    ASSERT_TRUE(write_rendezvous(path_, w).is_ok());
    auto r = read_rendezvous(path_, Clock::now() + 1s);
    ASSERT_TRUE(r) << r.status().to_string();
    EXPECT_EQ(r->port, w.port);
    EXPECT_EQ(r->secret, w.secret);
    EXPECT_EQ(r->host, w.host);
  }
}

TEST_F(RendezvousFile, NoWriterIsATimeoutNamingTheFile) {
  auto r = read_rendezvous(path_, Clock::now() + 100ms);
  EXPECT_TRUE(has(r.status(), Errc::timeout, {"rank 0 did not write the rendezvous file " + path_}));
}

// A directory others may enter is refused: another user could plant a file there that sends the
// ranks to an orchestrator of theirs.
TEST_F(RendezvousFile, ADirectoryOpenToOthersIsRefused) {
  const std::string dir = root_ + "/mine";
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  EXPECT_TRUE(has(write_rendezvous(path_, {1, "s"}), Errc::invalid_config, {dir, "not this user's private directory"}));
  EXPECT_TRUE(has(read_rendezvous(path_, Clock::now() + 1s).status(), Errc::invalid_config, {dir}));
  ASSERT_EQ(::rmdir(dir.c_str()), 0);
  ASSERT_EQ(::symlink(root_.c_str(), dir.c_str()), 0);  // a link is not the directory
  EXPECT_TRUE(has(write_rendezvous(path_, {1, "s"}), Errc::invalid_config, {"not this user's private directory"}));
}

TEST_F(RendezvousFile, AGarbledFileIsAnError) {
  ASSERT_TRUE(write_rendezvous(path_, {1, "s"}).is_ok());
  std::ofstream(path_) << "70000 s\n";
  EXPECT_TRUE(has(read_rendezvous(path_, Clock::now() + 1s).status(), Errc::invalid_config, {"garbled"}));
}

} // namespace
} // namespace chorus
