// A file replaced whole: written beside its path under a name of its own, then renamed over it, so
// that a reader finds the old file or the new one, never a part of one, and two writers at once
// (threads or processes) do not mix. The flight recorder's dumps and the rendezvous file use it.
#pragma once
#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>

namespace chorus {

// A name of its own beside `path`: path.part<pid>.<n>.
std::string beside(const std::string& path);

// Writes all of `text` to `fd`, through short writes and interruptions; false on an error.
bool write_all(int fd, std::string_view text);

// Replaces `path` with `text`: a new file of `mode` beside it (made anew under a name nothing holds,
// never through a symbolic link), renamed over it. Returns why it could not, in words ("cannot write P: No space left on
// device"); nothing is then left beside it.
std::optional<std::string> replace_whole(const std::string& path, std::string_view text, mode_t mode);

} // namespace chorus
