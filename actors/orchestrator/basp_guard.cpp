#include "actors/orchestrator/basp_guard.hpp"

#include <caf/atom.hpp>

#include <algorithm>
#include <vector>

namespace chorus {

namespace {

// BASP's operations (caf/io/basp/message_type.hpp) and header flags (caf/io/basp/header.hpp).
enum Op : uint8_t {
  server_handshake = 0,
  client_handshake = 1,
  direct_message = 2,
  routed_message = 3,
  monitor_message = 4,
  down_message = 5,
  heartbeat = 6
};
constexpr uint8_t kNamedReceiver = 0x01;
// CAF's message ids (caf/message_id.hpp), carried in a message's operation data.
constexpr uint64_t kResponseFlag = 0x8000000000000000;
constexpr uint64_t kRequestIdMask = 0x0FFFFFFFFFFFFFFF;
bool is_request(uint64_t id) { return (id & kRequestIdMask) != 0 && (id & kResponseFlag) == 0; }
// Senders remembered per connection: a node answers a few (the orchestrator, CAF's helpers).
constexpr std::size_t kMaxAnswerable = 1024;
constexpr uint8_t kSelectConnection = 0x02;

std::string op_name(uint8_t op) {
  static const char* names[] = {"a server handshake", "a client handshake", "a direct message", "a routed message",
                                "a monitor message",  "a down message",     "a heartbeat"};
  return op < 7 ? names[op] : "operation " + std::to_string(op) + " (no BASP operation)";
}

uint64_t big_endian(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = v << 8 | p[i];
  return v;
}

} // namespace

BaspGuard::BaspGuard(BaspServer server, uint32_t max_payload) : server_(std::move(server)), max_payload_(max_payload) {}

std::string BaspGuard::check(const char* data, std::size_t size) {
  if (heard_) heard_->heard_now();
  const auto* p = reinterpret_cast<const uint8_t*>(data);
  while (size > 0 && failed_.empty()) {
    if (header_got_ < kHeaderSize) {
      const std::size_t k = std::min(size, kHeaderSize - header_got_);
      std::copy(p, p + k, header_.begin() + static_cast<std::ptrdiff_t>(header_got_));
      header_got_ += k, p += k, size -= k;
      if (header_got_ == kHeaderSize) failed_ = on_header();
      continue;
    }
    const std::size_t k = std::min<std::size_t>(size, payload_left_);
    const std::size_t look = std::min(k, prefix_need_ - prefix_.size());
    if (look > 0) {
      prefix_.append(reinterpret_cast<const char*>(p), look);
      if (prefix_.size() == prefix_need_) failed_ = on_prefix();
    }
    payload_left_ -= static_cast<uint32_t>(k), p += k, size -= k;
    if (failed_.empty() && payload_left_ == 0) failed_ = on_frame_end();
  }
  return failed_;
}

void BaspGuard::ended(bool by_guarded) {
  if (heard_) heard_->ended_now(by_guarded);
}

// The header is whole: is this a frame the client may send, of a size it may send?
std::string BaspGuard::on_header() {
  op_ = header_[0];
  const uint8_t flags = header_[3];
  const uint32_t len = static_cast<uint32_t>(big_endian(&header_[4], 4));
  const uint64_t operation_data = big_endian(&header_[8], 8);
  const uint64_t source_actor = big_endian(&header_[16], 8);
  const uint64_t dest_actor = big_endian(&header_[24], 8);
  const std::size_t node = server_.node.size();
  const std::string what = op_name(op_);
  if (op_ > heartbeat) return "sent " + what;
  if (op_ == server_handshake || op_ == routed_message)
    return "sent " + what + ", which a node never sends (it could name another node as its source)";
  if (op_ != client_handshake && pinned_.empty()) return "sent " + what + " before its handshake";
  if (len > max_payload_)
    return "sent " + what + " claiming " + std::to_string(len) + " bytes of payload (the bound is " +
           std::to_string(max_payload_) + ")";
  bool fits = false;
  prefix_need_ = 0;
  switch (op_) {
    case client_handshake:
      fits = len == node && source_actor == 0 && dest_actor == 0 && (flags & ~kSelectConnection) == 0;
      prefix_need_ = node;
      break;
    case direct_message:
      named_ = (flags & kNamedReceiver) != 0;
      if (named_ && dest_actor != static_cast<uint64_t>(caf::atom("SpawnServ")))
        return "sent a message to a named actor other than SpawnServ";
      if (!named_ && dest_actor != server_.actor && !answerable_.count(dest_actor))
        return "sent a message to actor " + std::to_string(dest_actor) + ", not the orchestrator's";
      fits = len > 0 && (flags & ~kNamedReceiver) == 0 && (!named_ || (len == server_.info_request.size() && len > 1));
      if (fits && is_request(operation_data) && ++unanswered_ > kMaxUnanswered)
        return "sent " + std::to_string(unanswered_) + " requests without reading their answers";
      prefix_need_ = named_ ? len : 1;  // the whole request, or the forwarding stack's length
      break;
    case monitor_message:
      fits = len == 2 * node && operation_data == 0;
      prefix_need_ = 2 * node;
      break;
    case down_message:
      fits = len > 2 * node && source_actor != 0 && dest_actor == 0 && operation_data == 0;
      prefix_need_ = 2 * node;
      break;
    case heartbeat:
      fits = len == 0 && source_actor == 0 && dest_actor == 0 && operation_data == 0;
      break;
  }
  if (!fits) return "sent " + what + " with a malformed header (" + std::to_string(len) + " bytes of payload)";
  payload_left_ = len;
  prefix_.clear();
  return len == 0 ? on_frame_end() : "";
}

// The payload's first prefix_need_ bytes are here: whose words are these?
std::string BaspGuard::on_prefix() {
  const std::size_t node = server_.node.size();
  const std::string what = op_name(op_);
  switch (op_) {
    case client_handshake:
      if (prefix_.compare(0, 8, server_.node, 0, 8) != 0) return "sent a handshake with a node id of an unknown kind";
      if (pinned_.empty()) {
        pinned_ = prefix_;
        heard_ = last_heard().enter(pinned_);
      } else if (prefix_ != pinned_) {
        return "sent a second handshake for another node";
      }
      return "";
    case direct_message:
      if (named_) return prefix_ == server_.info_request ? "" : "sent SpawnServ a message other than CAF's request for its info";
      return prefix_[0] == 0 ? "" : "sent a direct message with a forwarding stack";
    default:  // monitor and down messages: source and destination node
      if (prefix_.compare(0, node, pinned_) != 0) return "sent " + what + " in another node's name";
      if (prefix_.compare(node, node, server_.node) != 0) return "sent " + what + " for a node other than the orchestrator";
      return "";
  }
}

void BaspGuard::observe(const char* data, std::size_t size) {
  const auto* p = reinterpret_cast<const uint8_t*>(data);
  while (size > 0) {
    if (seen_skip_ > 0) {
      const std::size_t k = static_cast<std::size_t>(std::min<uint64_t>(seen_skip_, size));
      seen_skip_ -= k, p += k, size -= k;
      continue;
    }
    const std::size_t k = std::min(size, kHeaderSize - seen_got_);
    std::copy(p, p + k, seen_header_.begin() + static_cast<std::ptrdiff_t>(seen_got_));
    seen_got_ += k, p += k, size -= k;
    if (seen_got_ < kHeaderSize) continue;
    seen_got_ = 0;
    seen_skip_ = big_endian(&seen_header_[4], 4);
    const uint8_t op = seen_header_[0];
    const uint64_t sender = big_endian(&seen_header_[16], 8);
    if (op == direct_message && (big_endian(&seen_header_[8], 8) & kResponseFlag) != 0 && unanswered_ > 0)
      --unanswered_;
    if ((op == direct_message || op == routed_message) && sender != 0 && answerable_.insert(sender).second) {
      answerable_order_.push_back(sender);
      if (answerable_order_.size() > kMaxAnswerable) {
        answerable_.erase(answerable_order_.front());
        answerable_order_.pop_front();
      }
    }
  }
}

std::string BaspGuard::on_frame_end() {
  header_got_ = 0;
  return "";
}

} // namespace chorus
