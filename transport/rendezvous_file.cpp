#include "transport/rendezvous_file.hpp"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/env.hpp"
#include "core/log.hpp"
#include "core/whole_file.hpp"

namespace chorus {

namespace {

std::string dir_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// The start time of process `pid` (field 22 of /proc/PID/stat, in clock ticks since boot), or
// "" when there is no such process: with the pid, it names one process for good.
std::string started(long pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(f, stat)) return "";
  const auto close = stat.rfind(')');  // the command name may hold spaces and parentheses
  if (close == std::string::npos) return "";
  std::istringstream rest(stat.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i)
    if (i == 22) return field;
  return "";
}

} // namespace

Status write_rendezvous(const std::string& path, const Rendezvous& r) {
  if (auto s = make_private_dir(dir_of(path), "rendezvous"); !s) return s;
  const std::string text = std::to_string(r.port) + " " + std::to_string(::getpid()) + " " + started(::getpid()) + " " +
                           r.secret + "\n" + (r.host.empty() ? "" : "host " + r.host + "\n");
  if (auto why = replace_whole(path, text, 0600))
    return {Errc::invalid_config, "the rendezvous file " + path + ": " + *why};
  return Status::ok();
}

Result<Rendezvous> read_rendezvous(const std::string& path, Clock::time_point deadline) {
  if (auto s = make_private_dir(dir_of(path), "rendezvous"); !s) return s;
  auto pause = std::chrono::milliseconds(10);
  bool said_stale = false;
  for (bool said = false;; said = true) {
    std::ifstream f(path);
    if (f.is_open()) {  // renamed into place: whole
      Rendezvous r;
      unsigned port = 0;
      long pid = 0;
      std::string start;
      if (!(f >> port >> pid >> start) || port == 0 || port > 65535 || pid <= 0)
        return Status(Errc::invalid_config, "the rendezvous file " + path + " is garbled");
      f.get();  // the one blank before the secret: the rest of the line is the secret, blanks and all
      std::getline(f, r.secret);
      if (std::string line; std::getline(f, line) && line.rfind("host ", 0) == 0) r.host = line.substr(5);
      if (!r.host.empty() && r.host.back() == '\r') r.host.pop_back();
      r.port = static_cast<uint16_t>(port);
      if (started(pid) == start) return r;
      // Its writer is gone: an earlier job's; this job's rank 0 will write it anew.
      if (!said_stale) CHORUS_LOG(info, init, LogWhere{}, "the rendezvous file " + path + " is a gone process's; waiting for rank 0's");
      said_stale = true;
    }
    if (Clock::now() + pause >= deadline)
      return Status(Errc::timeout, "rank 0 did not write the rendezvous file " + path +
                                       " in time (is rank 0 running, on this host?)");
    if (!said) CHORUS_LOG(info, init, LogWhere{}, "waiting for rank 0's rendezvous file " + path);
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(200));
  }
}

} // namespace chorus
