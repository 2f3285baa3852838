// How a process starts on another host: ssh runs a small sh script there that goes to
// chorus-run's working directory, reads the secret from the first line of its standard input (so
// it is on no command line, here or there), and execs the program with its CHORUS_* variables.
// The rest of that input carries signals: chorus-run writes a signal's name on a line ("TERM"),
// and a watcher beside the program sends it; at the input's end (chorus-run or its ssh gone) the
// watcher sends TERM, so a remote process does not outlive its launcher.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "launch/rank_env.hpp"

namespace chorus::launch {

// `s` as one word for sh: in single quotes, a quote inside as '\''.
std::string shell_quote(std::string_view s);

// The script for sh on the remote host (what `sh -c` runs there), one line.
std::string remote_script(const std::string& cwd, const EnvVars& env, const std::string& program,
                          const std::vector<std::string>& args);

// The ssh program and its own arguments: CHORUS_RUN_SSH split at blanks (e.g. "ssh -p 2222"),
// else "ssh".
std::vector<std::string> ssh_program(const char* chorus_run_ssh);

// ssh's whole argv: `ssh` -o BatchMode=yes HOST "sh -c '<script>'". The remote user's login
// shell runs the last word and hands the script to sh: it is one line in single quotes, which
// sh, bash, zsh and csh read alike.
std::vector<std::string> ssh_argv(const std::vector<std::string>& ssh, const std::string& host,
                                  const std::string& script);

// The line that asks the remote watcher to send `sig` ("TERM\n"), or "" for a signal it is not
// told (those chorus-run forwards, and KILL).
std::string signal_line(int sig);

} // namespace chorus::launch
