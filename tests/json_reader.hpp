// A strict JSON reader for tests (RFC 8259: no trailing commas, no comments, no leading zeros,
// escapes checked, nothing after the value), so that a test can check a file chorus writes is
// valid JSON and look inside it without python.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace chorus::testing_json {

struct Json {
  enum class Type { null, boolean, number, string, array, object };
  Type type = Type::null;
  bool flag = false;
  double number = 0;
  std::string text;  // a string's value, or a number as written
  std::vector<Json> items;
  std::vector<std::pair<std::string, Json>> fields;

  // The field `key` of an object (null when absent or not an object).
  const Json* get(std::string_view key) const {
    for (const auto& [k, v] : fields)
      if (k == key) return &v;
    return nullptr;
  }
};

class JsonReader {
 public:
  explicit JsonReader(std::string_view text) : s_(text) {}

  // The document's value; on failure `error` says what and where.
  bool read(Json& out, std::string& error) {
    bool ok = value(out, 0);
    space();
    if (ok && pos_ != s_.size()) ok = fail("text after the value");
    if (!ok) error = error_ + " at offset " + std::to_string(pos_);
    return ok;
  }

 private:
  bool fail(const std::string& why) {
    if (error_.empty()) error_ = why;
    return false;
  }
  void space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  bool eat(char c) {
    space();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool word(std::string_view w) {
    if (s_.substr(pos_, w.size()) != w) return fail("bad literal");
    pos_ += w.size();
    return true;
  }
  bool digits() {
    const std::size_t from = pos_;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    return pos_ > from || fail("digit expected");
  }

  bool value(Json& v, int depth) {
    if (depth > 64) return fail("nested too deeply");
    space();
    if (pos_ == s_.size()) return fail("value expected");
    const char c = s_[pos_];
    if (c == '{') return object(v, depth);
    if (c == '[') return array(v, depth);
    if (c == '"') {
      v.type = Json::Type::string;
      return string(v.text);
    }
    if (c == 't' || c == 'f') {
      v.type = Json::Type::boolean;
      v.flag = c == 't';
      return word(c == 't' ? "true" : "false");
    }
    if (c == 'n') return word("null");
    return number(v);
  }

  bool number(Json& v) {
    const std::size_t from = pos_;
    if (s_[pos_] == '-') ++pos_;
    if (pos_ < s_.size() && s_[pos_] == '0') ++pos_;  // a zero stands alone before the point
    else if (!digits()) return false;
    if (pos_ < s_.size() && s_[pos_] == '.' && (++pos_, !digits())) return false;
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (!digits()) return false;
    }
    v.type = Json::Type::number;
    v.text = std::string(s_.substr(from, pos_ - from));
    v.number = std::strtod(v.text.c_str(), nullptr);
    return true;
  }

  bool string(std::string& out) {
    ++pos_;  // the opening quote
    while (pos_ < s_.size()) {
      const char c = s_[pos_++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return fail("control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ == s_.size()) break;
      const char e = s_[pos_++];
      static constexpr std::string_view kSimple = "\"\\/bfnrt", kMeaning = "\"\\/\b\f\n\r\t";
      if (const auto k = kSimple.find(e); k != std::string_view::npos) {
        out += kMeaning[k];
      } else if (e == 'u') {
        if (pos_ + 4 > s_.size()) break;
        const std::string hex(s_.substr(pos_, 4));
        if (hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) return fail("bad \\u escape");
        const long code = std::strtol(hex.c_str(), nullptr, 16);
        out += code < 0x80 ? static_cast<char>(code) : '?';  // tests compare ASCII only
        pos_ += 4;
      } else {
        return fail("bad escape");
      }
    }
    return fail("unterminated string");
  }

  bool array(Json& v, int depth) {
    ++pos_;
    v.type = Json::Type::array;
    if (eat(']')) return true;
    do {
      v.items.emplace_back();
      if (!value(v.items.back(), depth + 1)) return false;
    } while (eat(','));
    return eat(']') || fail("',' or ']' expected");
  }

  bool object(Json& v, int depth) {
    ++pos_;
    v.type = Json::Type::object;
    if (eat('}')) return true;
    do {
      space();
      if (pos_ == s_.size() || s_[pos_] != '"') return fail("a key expected");
      std::string key;
      if (!string(key)) return false;
      if (!eat(':')) return fail("':' expected");
      v.fields.emplace_back(std::move(key), Json{});
      if (!value(v.fields.back().second, depth + 1)) return false;
    } while (eat(','));
    return eat('}') || fail("',' or '}' expected");
  }

  std::string_view s_;
  std::size_t pos_ = 0;
  std::string error_;
};

} // namespace chorus::testing_json
