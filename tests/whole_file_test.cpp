// Files replaced whole (core/whole_file.hpp): the new text replaces the old under the asked
// mode, a failure says why and leaves nothing beside the file, and a symbolic link planted where
// the file beside it would be made, or a part left there, is passed over, untouched.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/whole_file.hpp"

namespace chorus {
namespace {

namespace fs = std::filesystem;

struct WholeFile : ::testing::Test {
  fs::path dir;
  void SetUp() override {
    dir = fs::temp_directory_path() / ("chorus_whole_file_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }
  std::vector<std::string> names() const {
    std::vector<std::string> n;
    for (const auto& e : fs::directory_iterator(dir)) n.push_back(e.path().filename().string());
    return n;
  }
};

std::string read(const fs::path& p) {
  std::ifstream f(p);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

TEST_F(WholeFile, ReplacesTheOldTextUnderTheAskedMode) {
  const std::string path = (dir / "f").string();
  ASSERT_FALSE(replace_whole(path, "first\n", 0600).has_value());
  ASSERT_FALSE(replace_whole(path, "second, longer\n", 0640).has_value());
  EXPECT_EQ(read(path), "second, longer\n");
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  const mode_t mask = ::umask(0);
  ::umask(mask);
  EXPECT_EQ(st.st_mode & 0777, 0640u & ~mask);
  EXPECT_EQ(names(), std::vector<std::string>{"f"}) << "a part was left beside the file";
}

TEST_F(WholeFile, AFailureSaysWhyAndLeavesNothingBeside) {
  const std::string missing = (dir / "no_such_dir" / "f").string();
  auto why = replace_whole(missing, "x", 0600);
  ASSERT_TRUE(why.has_value());
  EXPECT_EQ(why->rfind("cannot write " + missing + ".part", 0), 0u) << *why;
  EXPECT_NE(why->find("No such file or directory"), std::string::npos) << *why;
  // A directory where the file should be: the rename fails, and the part is removed.
  fs::create_directories(dir / "d" / "inner");
  why = replace_whole((dir / "d").string(), "x", 0600);
  ASSERT_TRUE(why.has_value());
  EXPECT_EQ(why->rfind("cannot rename ", 0), 0u) << *why;
  EXPECT_EQ(names(), std::vector<std::string>{"d"});
}

TEST_F(WholeFile, ALinkOrALeftoverWhereThePartWouldBeIsPassedOver) {
  const std::string path = (dir / "f").string();
  const fs::path target = dir / "target";
  std::ofstream(target) << "kept";
  // The next part's name: this process's, numbered one past the last.
  const std::string next = beside(path);
  const std::string after = path + ".part" + std::to_string(::getpid()) + "." +
                            std::to_string(std::stoull(next.substr(next.rfind('.') + 1)) + 1);
  const std::string next_after = after.substr(0, after.rfind('.') + 1) +
                                 std::to_string(std::stoull(after.substr(after.rfind('.') + 1)) + 1);
  fs::create_symlink(target, after);
  std::ofstream(next_after) << "left by a process that died";
  auto why = replace_whole(path, "whole", 0600);
  ASSERT_FALSE(why.has_value()) << *why;
  EXPECT_EQ(read(path), "whole");
  EXPECT_EQ(read(target), "kept") << "a planted link was written through";
  EXPECT_TRUE(fs::is_symlink(after));
  EXPECT_EQ(read(next_after), "left by a process that died");
}

TEST(WholeFileWrites, WriteAllWritesEveryByte) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const std::string text(1000, 'z');
  ASSERT_TRUE(write_all(fds[1], text));
  ::close(fds[1]);
  std::string got(2000, '\0');
  std::size_t n = 0;
  for (ssize_t r; (r = ::read(fds[0], got.data() + n, got.size() - n)) > 0;) n += static_cast<std::size_t>(r);
  ::close(fds[0]);
  EXPECT_EQ(got.substr(0, n), text);
}

} // namespace
} // namespace chorus
