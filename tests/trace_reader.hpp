// A trace file (observability/trace/) read back for tests: checked to be strict JSON, its complete
// events by thread, its metadata events by name and thread.
#pragma once
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "json_reader.hpp"

namespace chorus::testing_json {
inline Json read_json(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  const std::string text = s.str();
  Json j;
  std::string error;
  EXPECT_TRUE(JsonReader(text).read(j, error)) << path << ": " << error;
  return j;
}

// "12.345" (microseconds, as the trace writes them) in nanoseconds, exactly.
inline int64_t ns_of(const Json& us) {
  const std::string& t = us.text;
  const auto dot = t.find('.');
  EXPECT_NE(dot, std::string::npos) << t;
  EXPECT_EQ(t.size() - dot, 4u) << "three decimals: " << t;
  return std::stoll(t.substr(0, dot)) * 1000 + std::stoll(t.substr(dot + 1));
}

struct Span {
  std::string name, cat;
  int64_t pid = 0, tid = 0, begin = 0, end = 0;
  const Json* args = nullptr;
  bool inside(const Span& outer) const { return begin >= outer.begin && end <= outer.end; }
  uint64_t arg(std::string_view key) const {
    const Json* v = args->get(key);
    EXPECT_TRUE(v) << name << " has no " << key;
    return v ? static_cast<uint64_t>(v->number) : UINT64_MAX;
  }
  std::string text(std::string_view key) const {
    const Json* v = args->get(key);
    return v ? v->text : "(none)";
  }
};

// A trace file read back: its complete events by thread, each thread's by start time; metadata
// by (name, tid).
struct TraceRead {
  Json doc;  // what the spans point into
  std::map<int64_t, std::vector<Span>> spans;
  std::map<std::pair<std::string, int64_t>, std::string> meta;  // the argument, as text
  const Json* other = nullptr;

  explicit TraceRead(const std::string& path) : doc(read_json(path)) {
    EXPECT_EQ(doc.type, Json::Type::object);
    const Json* events = doc.get("traceEvents");
    EXPECT_TRUE(events && events->type == Json::Type::array);
    EXPECT_TRUE(doc.get("displayTimeUnit") && doc.get("displayTimeUnit")->text == "ns");
    other = doc.get("otherData");
    EXPECT_TRUE(other);
    if (!events) return;
    for (const Json& e : events->items) {
      const std::string ph = e.get("ph")->text;
      const auto tid = static_cast<int64_t>(e.get("tid")->number);
      EXPECT_EQ(static_cast<int64_t>(e.get("pid")->number), ::getpid());
      if (ph == "M") {
        const Json& arg = e.get("args")->fields.at(0).second;
        meta[{e.get("name")->text, tid}] = arg.text;  // a name, or a sort index as written
        continue;
      }
      EXPECT_EQ(ph, "X");
      Span s{e.get("name")->text, e.get("cat")->text, ::getpid(), tid, ns_of(*e.get("ts")), 0, e.get("args")};
      s.end = s.begin + ns_of(*e.get("dur"));
      spans[tid].push_back(s);
    }
    for (auto& [tid, v] : spans)
      std::stable_sort(v.begin(), v.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  }
  std::vector<Span> of(int64_t tid, std::string_view cat) const {
    std::vector<Span> out;
    for (const Span& s : spans.at(tid))
      if (s.cat == cat) out.push_back(s);
    return out;
  }
  uint64_t other_num(std::string_view key) const {
    const Json* v = other ? other->get(key) : nullptr;
    return v ? static_cast<uint64_t>(v->number) : UINT64_MAX;
  }
};

} // namespace chorus::testing_json
