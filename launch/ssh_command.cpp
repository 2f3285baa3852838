#include "launch/ssh_command.hpp"

#include <signal.h>

#include <algorithm>

namespace chorus::launch {

std::string shell_quote(std::string_view s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') q += "'\\''";
    else q += c;
  }
  return q + "'";
}

std::string remote_script(const std::string& cwd, const EnvVars& env, const std::string& program,
                          const std::vector<std::string>& args) {
  std::string exec_line = "exec env";
  for (const auto& [name, value] : env) exec_line += " " + shell_quote(name + "=" + value);
  exec_line += " " + shell_quote(program);
  for (const auto& a : args) exec_line += " " + shell_quote(a);
  // One line, so that a login shell of any kind hands it to sh whole. The watcher starts before
  // the exec, so $$ (this shell, then the program in its place) is the process it signals. It
  // reads the input through fd 3, since an asynchronous command's standard input is /dev/null;
  // the program gets /dev/null rather than a share of the signal lines. The watcher's output goes
  // to /dev/null, or sshd would keep the session open until the watcher ends.
  return "cd " + shell_quote(cwd) + " || exit 127; " +
         "IFS= read -r CHORUS_SECRET || exit 127; export CHORUS_SECRET; " +
         "exec 3<&0 </dev/null; me=$$; " +
         "(while IFS= read -r sig; do kill -s \"$sig\" \"$me\"; done; kill -s TERM \"$me\") <&3 >/dev/null 2>&1 & " +
         "exec 3<&-; " + exec_line;
}

std::vector<std::string> ssh_program(const char* chorus_run_ssh) {
  std::vector<std::string> words;
  const std::string_view text = chorus_run_ssh ? chorus_run_ssh : "";
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t start = text.find_first_not_of(" \t", at);
    if (start == std::string_view::npos) break;
    const std::size_t end = std::min(text.find_first_of(" \t", start), text.size());
    words.emplace_back(text.substr(start, end - start));
    at = end;
  }
  if (words.empty()) words.push_back("ssh");
  return words;
}

std::vector<std::string> ssh_argv(const std::vector<std::string>& ssh, const std::string& host,
                                  const std::string& script) {
  std::vector<std::string> argv = ssh;
  argv.insert(argv.end(), {"-o", "BatchMode=yes", host, "sh -c " + shell_quote(script)});
  return argv;
}

std::string signal_line(int sig) {
  switch (sig) {
    case SIGINT: return "INT\n";
    case SIGTERM: return "TERM\n";
    case SIGHUP: return "HUP\n";
    case SIGQUIT: return "QUIT\n";
    case SIGUSR1: return "USR1\n";
    case SIGUSR2: return "USR2\n";
    case SIGKILL: return "KILL\n";
    default: return "";
  }
}

} // namespace chorus::launch
