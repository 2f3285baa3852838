#include "launch/line_tagger.hpp"

namespace chorus::launch {

LineTagger::LineTagger(uint32_t rank) : tag_("[" + std::to_string(rank) + "] ") {}

std::string LineTagger::feed(std::string_view bytes) {
  std::string out;
  while (!bytes.empty()) {
    const std::size_t nl = bytes.find('\n');
    const std::size_t take = nl == std::string_view::npos ? bytes.size() : nl + 1;
    const std::size_t room = kMaxLine - partial_.size();
    if (take > room) {  // the line is too long: its first kMaxLine bytes go out as a line
      partial_.append(bytes.substr(0, room));
      bytes.remove_prefix(room);
      out += tag_ + partial_ + "\n";
      partial_.clear();
      cut_ = true;
      continue;
    }
    partial_.append(bytes.substr(0, take));
    bytes.remove_prefix(take);
    if (partial_.back() == '\n') {
      if (!(cut_ && partial_.size() == 1)) out += tag_ + partial_;  // a cut line's newline alone adds no line
      partial_.clear();
      cut_ = false;
    }
  }
  return out;
}

std::string LineTagger::finish() {
  if (partial_.empty()) return "";
  std::string out = tag_ + partial_ + "\n";
  partial_.clear();
  return out;
}

} // namespace chorus::launch
