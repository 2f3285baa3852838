// Reading chorus's settings from the environment, strictly: a value that is not what the variable
// takes is an error naming the variable, never a silent default.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <chorus/result.hpp>

namespace chorus {

// The variable's value; nullopt when it is unset or empty.
std::optional<std::string> env_text(const char* name);
// `text` as a whole number in [min, max] (digits only: no sign, blank or suffix); nullopt otherwise.
std::optional<uint64_t> whole_number(std::string_view text, uint64_t min, uint64_t max);
// A whole number in [min, max]; nullopt when unset or empty; an error naming the variable, its
// value and the range otherwise.
Result<std::optional<uint64_t>> env_number(const char* name, uint64_t min, uint64_t max);
// Where chorus keeps a file for this user alone (a rendezvous or join file): the session's runtime
// directory when it has one (no other user can take its name first), else a directory of this
// user's in TMPDIR (made private, or refused, by whoever writes there: rendezvous_file.hpp).
std::string private_file_dir();
// The directory `dir` exists (made, mode 0700, where missing), is a directory (not a link), is this
// user's, and no one else may enter it; else an error naming it (`what`: whose directory it is,
// "rendezvous" or "store"), for another user could otherwise plant the files read there.
Status make_private_dir(const std::string& dir, const char* what);

} // namespace chorus
