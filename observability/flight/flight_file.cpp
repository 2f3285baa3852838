#include "observability/flight/flight_file.hpp"

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <map>

#include <fcntl.h>
#include <unistd.h>

#include "core/whole_file.hpp"

namespace chorus {

namespace {

constexpr std::string_view kFirstLine = "# chorus flight recorder, format 1";

std::string quote_text(std::string_view s) {
  std::string q = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') q += '\\';
    if (c == '\n') {
      q += "\\n";
      continue;
    }
    q += c;
  }
  return q + "\"";
}

std::string dims(const FlightRow& r) {
  if (!r.has_data) return "-";
  if (r.shape.empty()) return "scalar";
  std::string s;
  for (std::size_t i = 0; i < r.shape.size(); ++i) {
    if (i) s += 'x';
    s += std::to_string(r.shape[i]);
  }
  return s;
}

// A line's `key=value` fields (values may be quoted, with \" \\ \n escapes); false when malformed.
bool fields(std::string_view line, std::map<std::string, std::string>& out) {
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ') ++i;
    if (i == line.size()) break;
    const std::size_t eq = line.find('=', i);
    if (eq == std::string_view::npos) return false;
    std::string key(line.substr(i, eq - i)), value;
    i = eq + 1;
    if (i < line.size() && line[i] == '"') {
      for (++i;; ++i) {
        if (i >= line.size()) return false;  // no closing quote
        if (line[i] == '"') break;
        if (line[i] == '\\' && i + 1 < line.size()) {
          ++i;
          value += line[i] == 'n' ? '\n' : line[i];
        } else {
          value += line[i];
        }
      }
      ++i;
    } else {
      const std::size_t end = line.find(' ', i);
      value = std::string(line.substr(i, end == std::string_view::npos ? std::string_view::npos : end - i));
      i = end == std::string_view::npos ? line.size() : end;
    }
    out[key] = std::move(value);
  }
  return true;
}

template <class Int>
bool number(const std::map<std::string, std::string>& f, const std::string& key, Int& v) {
  auto it = f.find(key);
  if (it == f.end()) return false;
  const std::string& s = it->second;
  return std::from_chars(s.data(), s.data() + s.size(), v).ec == std::errc{} && !s.empty();
}

bool text(const std::map<std::string, std::string>& f, const std::string& key, std::string& v) {
  auto it = f.find(key);
  if (it == f.end()) return false;
  v = it->second;
  return true;
}

// An op line's fields into `r`: the name of the first field that is missing or wrong, or "".
std::string read_row(const std::map<std::string, std::string>& f, FlightRow& r) {
  std::string s;
  if (!number(f, "peer", r.peer)) return "peer";
  if (!number(f, "rank", r.rank)) return "rank";
  if (!number(f, "group", r.op.group)) return "group";
  if (!text(f, "seq", s)) return "seq";
  if (s == "-") r.op.seq = kNoSeq;
  else if (!number(f, "seq", r.op.seq)) return "seq";
  if (!text(f, "kind", s) || !parse_op_kind(s)) return "kind";
  r.op.kind = *parse_op_kind(s);
  if (!text(f, "shape", s)) return "shape";
  r.has_data = s != "-";
  r.shape.clear();
  if (r.has_data && s != "scalar") {
    for (std::size_t i = 0; i <= s.size();) {
      std::size_t x = s.find('x', i);
      if (x == std::string::npos) x = s.size();
      int64_t d = 0;
      if (std::from_chars(s.data() + i, s.data() + x, d).ec != std::errc{} || x == i) return "shape";
      r.shape.push_back(d);
      i = x + 1;
    }
  }
  r.op.count = r.has_data ? shape_numel(r.shape) : 0;
  if (!text(f, "dtype", s)) return "dtype";
  if (r.has_data) {
    if (!parse_dtype(s)) return "dtype";
    r.op.dtype = *parse_dtype(s);
  }
  if (!text(f, "redop", s) || !parse_reduce_op(s)) return "redop";
  r.op.redop = *parse_reduce_op(s);
  uint32_t root = 0;  // the caller's PeerId as given (OpDesc keeps it as an int)
  if (!number(f, "root", root)) return "root";
  r.op.root = static_cast<int>(root);
  if (!number(f, "other", r.other)) return "other";
  if (!number(f, "tag", r.tag)) return "tag";
  if (!number(f, "bytes", r.bytes)) return "bytes";
  if (!text(f, "strategy", r.strategy)) return "strategy";
  if (!text(f, "state", s) || !parse_flight_state(s, r.state)) return "state";
  if (!number(f, "enter_ns", r.enter_ns)) return "enter_ns";
  if (!number(f, "matched_ns", r.matched_ns)) return "matched_ns";
  if (!number(f, "exit_ns", r.exit_ns)) return "exit_ns";
  if (!text(f, "error", r.error)) return "error";
  return "";
}

} // namespace

std::string write_flight_dump(const FlightDump& d) {
  std::string out(kFirstLine);
  out += "\nprocess pid=" + std::to_string(d.pid) + " node=" + std::to_string(d.node) + " host=" + quote_text(d.host) +
         " written_ns=" + std::to_string(d.written_ns) + " world=" + std::to_string(d.world) +
         " reason=" + quote_text(d.reason) + "\n";
  for (const FlightRow& r : d.rows) {
    out += "op peer=" + std::to_string(r.peer) + " rank=" + std::to_string(r.rank) + " group=" + std::to_string(r.op.group) +
           " seq=" + (r.collective() ? std::to_string(r.op.seq) : "-") + " kind=" + std::string(to_string(r.op.kind)) +
           " dtype=" + (r.has_data ? std::string(to_string(r.op.dtype)) : "-") + " shape=" + dims(r) +
           " redop=" + std::string(to_string(r.op.redop)) + " root=" + std::to_string(static_cast<uint32_t>(r.op.root)) +
           " other=" + std::to_string(r.other) + " tag=" + std::to_string(r.tag) + " bytes=" + std::to_string(r.bytes) +
           " strategy=" + quote_text(r.strategy) + " state=" + std::string(to_string(r.state)) +
           " enter_ns=" + std::to_string(r.enter_ns) + " matched_ns=" + std::to_string(r.matched_ns) +
           " exit_ns=" + std::to_string(r.exit_ns) + " error=" + quote_text(r.error) + "\n";
  }
  return out;
}

Result<FlightDump> parse_flight_dump(std::string_view text_in) {
  FlightDump d;
  bool header = false, process = false;
  std::size_t line_no = 0;
  for (std::size_t i = 0; i < text_in.size();) {
    std::size_t end = text_in.find('\n', i);
    if (end == std::string_view::npos) end = text_in.size();
    const std::string_view line = text_in.substr(i, end - i);
    i = end + 1;
    ++line_no;
    auto bad = [&](const std::string& why) {
      return Status(Errc::invalid_argument, "line " + std::to_string(line_no) + ": " + why);
    };
    if (line.empty()) continue;
    if (!header) {
      if (line != kFirstLine) return bad("not a chorus flight recorder (expected '" + std::string(kFirstLine) + "')");
      header = true;
      continue;
    }
    std::map<std::string, std::string> f;
    const std::size_t sp = line.find(' ');
    const std::string_view what = line.substr(0, sp);
    if (sp == std::string_view::npos || !fields(line.substr(sp + 1), f)) return bad("malformed fields");
    if (what == "process") {
      if (!number(f, "pid", d.pid) || !number(f, "node", d.node) || !text(f, "host", d.host) ||
          !number(f, "written_ns", d.written_ns) || !text(f, "reason", d.reason))
        return bad("a process line needs pid, node, host, written_ns and reason");
      if (f.count("world") && !number(f, "world", d.world)) return bad("process field 'world' is wrong");
      process = true;
    } else if (what == "op") {
      FlightRow r;
      if (auto wrong = read_row(f, r); !wrong.empty()) return bad("op field '" + wrong + "' is missing or wrong");
      r.ticket = d.rows.size() + 1;
      d.rows.push_back(std::move(r));
    } else {
      return bad("unknown line '" + std::string(what) + "'");
    }
  }
  if (!header) return Status(Errc::invalid_argument, "empty: not a chorus flight recorder");
  if (!process) return Status(Errc::invalid_argument, "no process line");
  return d;
}

namespace {

// Gives the written spare (a file with no name) the name `path`, through its /proc entry
// (linkat's AT_EMPTY_PATH needs a capability before Linux 6.10); false when it cannot.
bool name_spare(int fd, const std::string& path) {
  const std::string self = "/proc/self/fd/" + std::to_string(fd);
  if (::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, path.c_str(), AT_SYMLINK_FOLLOW) == 0) return true;
  if (errno != EEXIST) return false;  // an older dump: beside it, then over it
  const std::string tmp = beside(path);
  if (::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, tmp.c_str(), AT_SYMLINK_FOLLOW) != 0) return false;
  if (std::rename(tmp.c_str(), path.c_str()) == 0) return true;
  std::remove(tmp.c_str());
  return false;
}

} // namespace

Result<std::string> write_flight_file(const std::string& path, const FlightDump& d, int spare) {
  const std::string text = write_flight_dump(d);
  if (spare >= 0) {
    const bool named = write_all(spare, text) && name_spare(spare, path);
    ::close(spare);
    if (named) return path;
  }
  if (auto why = replace_whole(path, text, 0666))
    return Status(Errc::invalid_config, "the flight recorder " + *why + " (flight_dir, CHORUS_FLIGHT_DIR)");
  return path;
}

} // namespace chorus
