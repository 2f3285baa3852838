#include "observability/trace/trace_json.hpp"

#include <string>
#include <string_view>

#include "observability/flight/flight_clock.hpp"
#include "core/op_kinds.hpp"

namespace chorus {

namespace {

void put_string(std::string& o, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  o += '"';
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (u < 0x20) {
      o += "\\u00";
      o += kHex[u >> 4];
      o += kHex[u & 15];
    } else {
      o += c;
    }
  }
  o += '"';
}

// Nanoseconds as microseconds with three decimals, exactly (no double on the way).
void put_us(std::string& o, int64_t ns) {
  if (ns < 0) {
    o += '-';
    ns = -ns;
  }
  const std::string frac = std::to_string(ns % 1000);
  o += std::to_string(ns / 1000);
  o += '.';
  o.append(3 - frac.size(), '0');
  o += frac;
}

// The "args" object of one event, field by field.
class Args {
 public:
  Args& num(std::string_view key, uint64_t v) { return raw(key, std::to_string(v)); }
  Args& str(std::string_view key, std::string_view v) {
    std::string q;
    put_string(q, v);
    return raw(key, q);
  }
  Args& raw(std::string_view key, std::string_view json) {
    text_ += text_.empty() ? "{" : ",";
    put_string(text_, key);
    text_ += ':';
    text_ += json;
    return *this;
  }
  std::string done() const { return text_.empty() ? "{}" : text_ + "}"; }

 private:
  std::string text_;
};

std::string op_args(const OpSpan& span) {
  const FlightOp& f = span.op;
  const OpDesc& op = f.op;
  Args a;
  a.num("group", op.group).num("rank", f.rank);
  if (op.seq != kNoSeq) a.num("seq", op.seq);
  else if (f.other == kAnySource) a.num("tag", f.tag);  // a receive from any source
  else a.num("peer", f.other).num("tag", f.tag);
  if (span.has_data) {
    std::string shape = "[";
    for (std::size_t i = 0; i < span.dims && i < kTraceDims; ++i) {
      if (i) shape += ',';
      shape += std::to_string(span.shape[i]);
    }
    a.str("dtype", to_string(op.dtype)).raw("shape", shape + "]").num("bytes", span.bytes);
    if (span.dims > kTraceDims) a.num("dims", span.dims);  // the shape above is its first kTraceDims sizes
  }
  if (span.strategy.path != RunStrategy::Path::none) a.str("strategy", to_string(span.strategy));
  if (reduces(op.kind)) a.str("reduce_op", to_string(op.redop));
  if (rooted(op.kind)) a.num("root", static_cast<uint32_t>(op.root));  // as the caller gave it
  if (span.error) a.str("status", *span.error);
  return a.done();
}

std::string step_args(const StepRecord& s) {
  Args a;
  if (s.conclude) return a.done();
  if (s.span.peer >= 0) a.num("peer", static_cast<uint64_t>(s.span.peer));
  a.num("bytes", s.span.bytes);
  if (s.span.sources > 1) a.num("sources", s.span.sources);
  return a.done();
}

// Writes events one by one, separated by commas.
class EventWriter {
 public:
  EventWriter(std::ostream& out, int64_t pid) : out_(out), pid_(std::to_string(pid)) {}

  void meta(std::string_view name, int64_t tid, std::string_view arg_key, const std::string& arg_json) {
    std::string e = "{\"name\":";
    put_string(e, name);
    e += ",\"ph\":\"M\",\"pid\":" + pid_ + ",\"tid\":" + std::to_string(tid) + ",\"args\":" +
         Args().raw(arg_key, arg_json).done() + "}";
    emit(e);
  }
  void span(std::string_view name, std::string_view cat, int64_t tid, int64_t begin_ns, int64_t end_ns,
            const std::string& args) {
    std::string e = "{\"name\":";
    put_string(e, name);
    e += ",\"cat\":\"";
    e += cat;
    e += "\",\"ph\":\"X\",\"pid\":" + pid_ + ",\"tid\":" + std::to_string(tid) + ",\"ts\":";
    put_us(e, begin_ns);
    e += ",\"dur\":";
    put_us(e, end_ns - begin_ns);
    e += ",\"args\":" + args + "}";
    emit(e);
  }

 private:
  void emit(const std::string& e) {
    out_ << (first_ ? "\n" : ",\n") << e;
    first_ = false;
  }
  std::ostream& out_;
  std::string pid_;
  bool first_ = true;
};

std::string json_string(std::string_view s) {
  std::string q;
  put_string(q, s);
  return q;
}

} // namespace

std::string op_span_name(const OpSpan& span) {
  const FlightOp& f = span.op;
  if (f.op.seq != kNoSeq) return op_label(f.op.kind, f.op.seq);
  return std::string(to_string(f.op.kind)) + (f.op.kind == OpKind::send ? " to " : " from ") +
         (f.other == kAnySource ? std::string("any") : std::to_string(f.other));
}

std::string_view step_span_name(const StepRecord& s) {
  if (s.conclude) return "conclude";
  const bool remote = s.span.remote;
  switch (s.span.kind) {
    case StepKind::send: return !remote ? "send" : s.span.post ? "remote send" : "remote send wait";
    case StepKind::recv_reduce: return remote ? "remote recv reduce" : "recv reduce";
    case StepKind::recv_copy: return remote ? "remote recv copy" : "recv copy";
    case StepKind::copy: return "copy";
    case StepKind::reduce: return "reduce";
  }
  return "step";
}

void write_trace_json(std::ostream& out, const TraceProcess& p, const std::vector<std::unique_ptr<PeerTrace>>& peers) {
  const flight_clock::ToUnix to_unix;
  const int64_t origin_ns = p.origin_unix_s * 1'000'000'000;
  auto at = [&](uint64_t reading) { return to_unix(reading) - origin_ns; };
  uint64_t kept = 0, dropped = 0;
  out << "{\"traceEvents\":[";
  EventWriter w(out, p.pid);
  const std::string process = p.multi_node ? (p.node >= 0 ? "node " + std::to_string(p.node) : "unjoined node")
                                           : "process " + std::to_string(p.pid);
  w.meta("process_name", 0, "name", json_string(process));
  if (p.node >= 0) w.meta("process_sort_index", 0, "sort_index", std::to_string(p.node));
  for (std::size_t i = 0; i < peers.size(); ++i) {
    const uint64_t rank = p.first_rank + i;
    const auto tid = static_cast<int64_t>(rank + 1);
    w.meta("thread_name", tid, "name", json_string("rank " + std::to_string(rank)));
    w.meta("thread_sort_index", tid, "sort_index", std::to_string(rank));
    const PeerTrace& t = *peers[i];
    t.ops().for_each([&](const OpSpan& op) {
      ++kept;
      w.span(op_span_name(op), "op", tid, at(op.begin), at(op.end), op_args(op));
      if (op.matched) w.span("match", "match", tid, at(op.begin), at(op.matched), "{}");
    });
    t.steps().for_each([&](const StepRecord& s) {
      ++kept;
      w.span(step_span_name(s), "step", tid, at(s.span.begin), at(s.end), step_args(s));
    });
    dropped += t.dropped();
  }
  // Metadata: kept and dropped count records (an op with its match is one; each step one).
  Args other;
  other.str("producer", "chorus").num("pid", static_cast<uint64_t>(p.pid));
  if (p.multi_node) other.raw("node", std::to_string(p.node));
  other.num("origin_unix_s", static_cast<uint64_t>(p.origin_unix_s)).num("kept_events", kept).num("dropped_events", dropped);
  out << "\n],\"displayTimeUnit\":\"ns\",\"otherData\":" << other.done() << "}\n";
}

} // namespace chorus
