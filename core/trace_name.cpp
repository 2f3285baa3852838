#include "core/trace_name.hpp"

#include <algorithm>

namespace chorus {

std::string trace_pattern_problem(std::string_view pattern) {
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%') continue;
    const char c = i + 1 < pattern.size() ? pattern[++i] : '\0';
    if (c == 'p' || c == 'n' || c == '%') continue;
    std::string why = "'";  // built by appends: GCC 12 warns falsely of operator+ chains here
    why += pattern;
    why += c ? std::string("' has %") + c + " (only %p, %n and %% are replaced)" : "' ends with a lone %";
    return why;
  }
  return {};
}

std::string trace_file_name(std::string_view pattern, int64_t pid, int64_t node, bool multi_node) {
  const std::string pid_text = std::to_string(pid);
  const bool unjoined = multi_node && node < 0;
  const std::string node_text = unjoined ? "pid" + pid_text : std::to_string(std::max<int64_t>(node, 0));
  std::string out;
  bool named = false;  // the pattern names the process itself
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%' || i + 1 == pattern.size()) {
      out += pattern[i];
      continue;
    }
    const char c = pattern[++i];
    if (c == 'p') out += pid_text;
    else if (c == 'n') out += node_text;
    else out += c;
    named = named || c != '%';
  }
  if (!multi_node || named) return out;
  // ".nodeN" before the extension: the last '.' of the file's own name, not of a directory.
  const std::size_t slash = out.rfind('/');
  const std::size_t name_at = slash == std::string::npos ? 0 : slash + 1;
  const std::size_t dot = out.rfind('.');
  const std::size_t at = dot != std::string::npos && dot > name_at ? dot : out.size();  // ".trace": no extension
  return out.insert(at, unjoined ? "." + node_text : ".node" + node_text);
}

} // namespace chorus
