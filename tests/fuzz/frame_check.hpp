// The check of the data plane's frame parser (transport/tcp/tcp_connection.cpp, pump()) shared by
// tcp_frames_fuzz and tls_frames_fuzz: the input is the byte stream one node sends another; the
// connection pumps it (in small budgets, so that it stops and resumes anywhere) into a sink that
// takes frames as the global client does (frame_routing.cpp: control payloads up to 1 MiB,
// decoded; data into a buffer, or dropped), and what the sink saw must be what a plain reading
// of the stream says: the same frames with the same payloads in order, a failed frame exactly when
// the stream ends inside one it took, the end orderly exactly after a bye, a garbled header
// ending it. The connection serves the first membership epoch: a frame stamped with an earlier
// one is read and dropped (a bye too), one of a later one parks it (nothing more is read).
#pragma once
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_kit.hpp"
#include "messages/data_codec.hpp"
#include "transport/connection.hpp"
#include "transport/frame.hpp"

namespace chorus::fuzz {

// What a stream of frames says, read plainly.
struct Expected {
  std::vector<std::pair<FrameHeader, std::string>> frames;  // complete frames taken, bye excluded
  bool failed_frame = false;  // the stream ended inside a taken frame's payload (its header was read)
  bool garbled = false;       // a header with a wrong magic or an absurd length
  bool bye = false;
  bool parked = false;        // a later epoch's frame: it stays unread, the connection open
};

inline constexpr uint64_t kMaxPayload = uint64_t{1} << 40;  // tcp_connection.cpp's bound
inline constexpr std::size_t kMaxBuffered = std::size_t{1} << 20;

// Whether the sink takes a frame's payload: up to 1 MiB (as frame_routing.cpp takes control
// frames), but not every tenth data frame (by slot), so that the parser also reads payloads
// into its hole. A dropped frame is never reported to the sink again.
inline bool takes(const FrameHeader& h) {
  return h.bytes <= kMaxBuffered && !(h.type == FrameType::data && h.slot % 10 == 9);
}

// The frames whose payloads the sink takes, read plainly.
inline Expected read_plainly(const uint8_t* p, std::size_t n) {
  Expected x;
  std::size_t at = 0;
  while (n - at >= sizeof(FrameHeader)) {
    FrameHeader h;
    std::memcpy(&h, p + at, sizeof h);
    at += sizeof h;
    if (!FrameHeader::ours(h.magic) || h.bytes > kMaxPayload) {
      x.garbled = true;
      return x;
    }
    if (FrameHeader::later(h.magic, FrameHeader::kMagic)) {
      x.parked = true;
      return x;
    }
    const bool current = h.magic == FrameHeader::kMagic;  // else an earlier epoch's: dropped
    if (current && h.type == FrameType::bye) {
      x.bye = true;
      continue;
    }
    if (h.bytes > n - at) {
      x.failed_frame = current && takes(h);
      return x;
    }
    if (current && takes(h)) x.frames.emplace_back(h, std::string(reinterpret_cast<const char*>(p + at), h.bytes));
    at += h.bytes;
  }
  return x;
}

// Takes frames as the global client does, and records what it was told.
class RecordingSink final : public FrameSink {
 public:
  std::vector<std::pair<FrameHeader, std::string>> frames;
  int failed = 0, closed_count = 0;
  bool orderly = false;

  std::byte* begin_frame(uint32_t, const FrameHeader& h) override {
    FUZZ_CHECK(!open_, "a frame began inside another");
    FUZZ_CHECK(closed_count == 0, "a frame after the end");
    if (!takes(h)) return nullptr;
    open_ = true;
    cur_ = h;
    last_ = 0;
    buf_.assign(h.bytes, '\0');
    return reinterpret_cast<std::byte*>(buf_.data());
  }
  void progress(uint32_t, const FrameHeader& h, std::size_t got) override {
    FUZZ_CHECK(open_ && std::memcmp(&h, &cur_, sizeof h) == 0, "progress of another frame than the one begun");
    FUZZ_CHECK(got >= last_ && got <= h.bytes, "progress went back or beyond the payload");
    last_ = got;
    if (got < h.bytes) return;
    open_ = false;
    frames.emplace_back(h, buf_);
    decode(h);
  }
  void frame_failed(uint32_t, const FrameHeader& h) override {
    FUZZ_CHECK(open_ && std::memcmp(&h, &cur_, sizeof h) == 0, "a failure of a frame not being read");
    open_ = false;
    ++failed;
  }
  void closed(uint32_t, bool was_orderly, const std::string& why) override {
    FUZZ_CHECK(!why.empty(), "a connection's end says why");
    ++closed_count;
    orderly = was_orderly;
  }

 private:
  // The control payloads through their decoders, as frame_routing.cpp does.
  void decode(const FrameHeader& h) {
    std::string error;
    if (h.type == FrameType::announce) (void)decode_announcement(buf_.data(), buf_.size(), error);
    if (h.type == FrameType::p2p_ack || h.type == FrameType::p2p_cancel || h.type == FrameType::p2p_pull)
      (void)decode_p2p_ack(buf_.data(), buf_.size(), error);
    if (h.type == FrameType::p2p_pulled) (void)decode_p2p_ack(buf_.data(), buf_.size(), error);
    if (h.type == FrameType::p2p_data) (void)decode_p2p_header(buf_.data(), buf_.size(), error);
    if (h.type == FrameType::hello) (void)decode_data_hello(buf_.data(), buf_.size(), error);
  }
  bool open_ = false;
  FrameHeader cur_{};
  std::size_t last_ = 0;
  std::string buf_;
};

// Pumps `c` (whose other end sent `input` and closed) to its end, then compares.
inline void pump_and_compare(Connection& c, RecordingSink& sink, const uint8_t* input, std::size_t size) {
  // Budgets from 1 byte up: a pump stops (and the next resumes) inside headers and payloads.
  std::size_t budget = 1;
  int pumps = 0;
  Connection::Pumped r = Connection::Pumped::idle;
  for (;;) {
    FUZZ_CHECK(++pumps < 1000000, "the connection never ended");
    r = c.pump(budget);
    if (r == Connection::Pumped::ended || r == Connection::Pumped::parked) break;
    budget = budget * 3 % 70001 + 1;
  }
  const Expected x = read_plainly(input, size);
  FUZZ_CHECK((r == Connection::Pumped::parked) == x.parked, "parked exactly at a later epoch's frame");
  FUZZ_CHECK(sink.closed_count == (x.parked ? 0 : 1), "told of the end " + std::to_string(sink.closed_count) + " times");
  FUZZ_CHECK(x.parked || sink.orderly == x.bye, "orderly end exactly after a bye");
  FUZZ_CHECK(sink.frames.size() == x.frames.size(),
             std::to_string(sink.frames.size()) + " frames, expected " + std::to_string(x.frames.size()));
  for (std::size_t i = 0; i < x.frames.size(); ++i) {
    const auto& [h, payload] = sink.frames[i];
    FUZZ_CHECK(std::memcmp(&h, &x.frames[i].first, sizeof h) == 0, "frame " + std::to_string(i) + "'s header");
    FUZZ_CHECK(payload == x.frames[i].second, "frame " + std::to_string(i) + "'s payload");
  }
  FUZZ_CHECK(sink.failed == (x.failed_frame ? 1 : 0), "a failed frame exactly when the stream ended inside one");
}

} // namespace chorus::fuzz
