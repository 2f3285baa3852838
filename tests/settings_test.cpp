// The table of every CHORUS_* variable (core/settings_table.cpp): its readers' rules, and the docs
// and the code kept to it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>

#include <chorus/config.hpp>

#include "observability/flight/flight_recorder.hpp"
#include "core/log.hpp"
#include "core/settings.hpp"

using namespace chorus;
namespace fs = std::filesystem;

namespace {

// Sets one variable for a test's span, and puts back what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_, old_->c_str(), 1);
    else unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

std::string read_file(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// The lines between "<!-- settings:WHICH -->" and "<!-- /settings:WHICH -->".
std::string block(const std::string& text, const std::string& which) {
  const std::string open = "<!-- settings:" + which + " -->\n", close = "<!-- /settings:" + which + " -->";
  const auto a = text.find(open), b = text.find(close);
  if (a == std::string::npos || b == std::string::npos || b < a) return "(no block " + which + ")";
  return text.substr(a + open.size(), b - a - open.size());
}

const fs::path kRoot = CHORUS_SOURCE_DIR;

} // namespace

TEST(Settings, TheTableNamesEachVariableOnceWithWhatItTakes) {
  std::set<std::string> names;
  for (const Setting& s : settings()) {
    const std::string name = s.name;
    EXPECT_TRUE(names.insert(name).second) << name << " twice";
    EXPECT_EQ(name.rfind("CHORUS_", 0), 0u) << name;
    EXPECT_EQ(find_setting(name), &s) << name;
    EXPECT_NE(std::string(s.meaning), "") << name;
    EXPECT_NE(std::string(s.read_in), "") << name;
    EXPECT_NE(std::string(s.shown_default), "") << name;
    if (s.kind == SettingKind::flag) {
      EXPECT_TRUE(s.min == 0 && s.max == 1) << name;
    }
    if (s.kind != SettingKind::text) {
      EXPECT_LE(s.min, s.max) << name;
      EXPECT_TRUE(s.fallback >= s.min && s.fallback <= s.max) << name << "'s default is not a value it takes";
    }
    // What a user sets is on the README's front page; what tests and launchers set among themselves is not.
    if (s.reader == SettingReader::library || s.reader == SettingReader::from_env) {
      EXPECT_NE(std::string(s.brief), "") << name;
    }
  }
  EXPECT_EQ(find_setting("CHORUS_NO_SUCH"), nullptr);
  EXPECT_EQ(names.size(), static_cast<std::size_t>(SettingId::count));
}

TEST(Settings, TheStrictReaderNamesTheVariableItsValueAndWhatItTakes) {
  {
    ScopedEnv e("CHORUS_PEERS", "12");
    auto v = setting_number(SettingId::peers);
    ASSERT_TRUE(v.is_ok()) << v.status().to_string();
    EXPECT_EQ(v->value_or(0), 12u);
  }
  for (const char* bad : {"abc", "0", "4097", "12x", "-1", " 3"}) {
    ScopedEnv e("CHORUS_PEERS", bad);
    auto v = setting_number(SettingId::peers);
    ASSERT_FALSE(v.is_ok()) << bad;
    EXPECT_EQ(v.status().code(), Errc::invalid_config);
    EXPECT_EQ(v.status().message(), "CHORUS_PEERS='" + std::string(bad) + "' is not a whole number from 1 to 4096");
    EXPECT_EQ(setting_problem(SettingId::peers), v.status().message());
    // Config::from_env() passes the same words on.
    auto c = Config::from_env();
    ASSERT_FALSE(c.is_ok());
    EXPECT_NE(c.status().message().find("CHORUS_PEERS='" + std::string(bad) + "'"), std::string::npos) << c.status().message();
  }
  {
    ScopedEnv e("CHORUS_SEAL_DATA", "yes");
    auto v = setting_number(SettingId::seal_data);
    ASSERT_FALSE(v.is_ok());
    EXPECT_EQ(v.status().message(), "CHORUS_SEAL_DATA='yes' is not 0 or 1");
  }
  for (const char* unset : {static_cast<const char*>(nullptr), ""}) {  // empty counts as unset
    ScopedEnv e("CHORUS_PEERS", unset);
    auto v = setting_number(SettingId::peers);
    ASSERT_TRUE(v.is_ok());
    EXPECT_FALSE(v->has_value());
    EXPECT_EQ(setting_problem(SettingId::peers), "");
    ScopedEnv t("CHORUS_ORCHESTRATOR", unset);
    EXPECT_FALSE(setting_text(SettingId::orchestrator).has_value());
  }
  ScopedEnv t("CHORUS_ORCHESTRATOR", "h:1");
  EXPECT_EQ(setting_text(SettingId::orchestrator).value_or(""), "h:1");
  EXPECT_FALSE(setting_number(SettingId::orchestrator).is_ok()) << "a text setting is no number";
}

TEST(Settings, TheOncePerProcessReaderTakesTheDefaultForAWrongValueAndSaysSo) {
  std::mutex mu;
  std::vector<std::string> lines;
  set_log_sink([&](const std::string& l) {
    std::lock_guard<std::mutex> lk(mu);
    lines.push_back(l);
  });
  ScopedEnv quiet_level("CHORUS_DEBUG", nullptr), quiet_subsys("CHORUS_DEBUG_SUBSYS", nullptr);
  ASSERT_EQ(configure_log("warn", "init"), "");
  {
    ScopedEnv e("CHORUS_SHM_RING_KIB", "8");  // below what it takes (64 KiB)
    EXPECT_EQ(tuned_number(SettingId::shm_ring_kib), 4096u);
    ScopedEnv s("CHORUS_SPIN_US", "fast");
    EXPECT_EQ(tuned_micros(SettingId::spin_us), std::chrono::microseconds(20));
    ScopedEnv a("CHORUS_ARENA_KIB", "0");  // a value it takes: the arena off
    EXPECT_EQ(tuned_number(SettingId::arena_kib), 0u);
    ScopedEnv w("CHORUS_ARENA_WAIT_MS", "");  // unset
    EXPECT_EQ(tuned_number(SettingId::arena_wait_ms), 50u);
  }
  configure_log("none", "all");
  set_log_sink(nullptr);
  std::lock_guard<std::mutex> lk(mu);
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  ASSERT_EQ(lines.size(), 2u) << all;
  EXPECT_NE(lines[0].find("CHORUS_SHM_RING_KIB='8' is not a whole number from 64 to 1048576: 4096 instead"),
            std::string::npos)
      << lines[0];
  EXPECT_NE(lines[1].find("CHORUS_SPIN_US='fast' is not a whole number from 0 to 1000000: 20 instead"), std::string::npos)
      << lines[1];
}

TEST(Settings, AWrongFlightRecorderSizeFailsRegistrationNamingIt) {
  ScopedEnv n("CHORUS_FLIGHT_RECORDER", "lots");
  ScopedEnv off("CHORUS_FLIGHT_SIGNAL", "0");  // (any other value: on, as it always was)
  Config c;
  auto r = FlightRecorder::for_config(c);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Errc::invalid_config);
  EXPECT_EQ(r.status().message(), "CHORUS_FLIGHT_RECORDER='lots' is not a whole number from 0 to 1048576");
  ScopedEnv seven("CHORUS_FLIGHT_RECORDER", "7");
  auto ok = FlightRecorder::for_config(c);
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
  ASSERT_NE(*ok, nullptr);
}

TEST(Settings, TheReportShowsEveryValueButTheSecret) {
  ScopedEnv s("CHORUS_SECRET", "hunter2"), p("CHORUS_PEERS", "0");
  const std::string report = settings_report();
  EXPECT_EQ(report.find("hunter2"), std::string::npos) << report;
  EXPECT_NE(report.find("CHORUS_SECRET = (set; not shown)"), std::string::npos) << report;
  EXPECT_NE(report.find("CHORUS_PEERS = 0"), std::string::npos) << report;
  EXPECT_NE(report.find("! CHORUS_PEERS='0' is not a whole number from 1 to 4096"), std::string::npos) << report;
  EXPECT_EQ(report.find("CHORUS_FAULT_KIND"), std::string::npos) << "the tests' variables are not the user's";
}

// docs/settings.md and the README are made from the table (scripts/settings_doc.sh).
TEST(Settings, TheDocsTablesAreTheTable) {
  const std::string docs = read_file(kRoot / "docs/settings.md"), readme = read_file(kRoot / "README.md");
  const char* fix = "; run scripts/settings_doc.sh";
  EXPECT_EQ(block(readme, "readme"), settings_readme_markdown()) << "README.md" << fix;
  EXPECT_EQ(block(docs, "library"), settings_markdown(SettingReader::library)) << "docs/settings.md" << fix;
  EXPECT_EQ(block(docs, "from_env"), settings_markdown(SettingReader::from_env)) << "docs/settings.md" << fix;
  EXPECT_EQ(block(docs, "programs"), settings_markdown(SettingReader::programs)) << "docs/settings.md" << fix;
  EXPECT_EQ(block(docs, "tests"), settings_markdown(SettingReader::tests)) << "docs/settings.md" << fix;
}

// Every CHORUS_* name the code reads or sets as an environment variable is in the table: a name in
// quotes ("CHORUS_X", 'CHORUS_X'), one followed by '=' (a value set), or a shell's $CHORUS_X.
TEST(Settings, EveryVariableTheCodeNamesIsInTheTable) {
  // Names that are not environment variables: CMake options and macros, and a decoy in a test.
  const std::set<std::string> not_variables{"CHORUS_WITH_CUDA", "CHORUS_SANITIZE", "CHORUS_PYTHON", "CHORUS_VERSION",
                                            "CHORUS_TORCH_VERSION", "CHORUS_SOURCE_DIR", "CHORUS_RANKS"};
  const std::regex named(R"((-D)?(\$\{?)?["']?(CHORUS_[A-Z0-9_]+)(["'=]|\b))");
  const std::set<std::string> kinds{".cpp", ".hpp", ".cu", ".cuh", ".py", ".sh", ".txt"};
  std::set<std::string> missing;
  std::size_t files = 0, seen = 0;
  for (const char* dir : {"actors", "bench", "core", "cuda", "engine", "examples", "gradsync", "include", "launch",
                          "messages", "observability", "programs", "python", "scripts", "strategies", "tests",
                          "transport", ".ci"}) {
    if (!fs::exists(kRoot / dir)) continue;
    for (const auto& f : fs::recursive_directory_iterator(kRoot / dir)) {
      if (!f.is_regular_file() || (!kinds.count(f.path().extension().string()) && f.path().filename() != "run")) continue;
      if (f.path().filename() == "settings_test.cpp") continue;  // this file's names are examples
      ++files;
      const std::string text = read_file(f.path());
      for (std::sregex_iterator m(text.begin(), text.end(), named), end; m != end; ++m) {
        // In CMake, ${NAME} is CMake's own variable (its environment is $ENV{NAME}, quoted or set).
        const bool cmake = f.path().extension() == ".txt";
        const bool quoted_or_set = (*m)[4].length() > 0 || (!cmake && (*m)[2].length() > 0);
        if ((*m)[1].length() > 0 || !quoted_or_set) continue;  // -DNAME: a build option; a bare word: no variable
        const std::string name = (*m)[3];
        if (not_variables.count(name)) continue;
        ++seen;
        if (!find_setting(name)) missing.insert(name + " (" + fs::relative(f.path(), kRoot).string() + ")");
      }
    }
  }
  EXPECT_GT(files, 100u);
  EXPECT_GT(seen, 100u);
  std::string list;
  for (const auto& m : missing) list += " " + m;
  EXPECT_TRUE(missing.empty()) << "named in the code, not in core/settings_table.cpp:" << list;
}
