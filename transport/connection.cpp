#include "transport/connection.hpp"

#include <cstring>

namespace chorus {

std::shared_ptr<SendTicket> SendTicket::of(FrameHeader h, const std::byte* payload) {
  auto t = std::make_shared<SendTicket>();
  t->header = h;
  t->payload = payload;
  return t;
}

std::shared_ptr<SendTicket> SendTicket::owning(FrameHeader h, std::string payload) {
  auto t = std::make_shared<SendTicket>();
  t->owned = std::move(payload);
  h.bytes = t->owned.size();
  t->header = h;
  t->payload = reinterpret_cast<const std::byte*>(t->owned.data());
  return t;
}

std::shared_ptr<SendTicket> SendTicket::prefixed(FrameHeader h, std::string prefix, const std::byte* payload,
                                                 std::size_t payload_bytes) {
  auto t = std::make_shared<SendTicket>();
  t->prefix = std::move(prefix);
  h.bytes = t->prefix.size() + payload_bytes;
  t->header = h;
  t->payload = payload;
  return t;
}

std::shared_ptr<SendTicket> SendTicket::after(std::string preamble, FrameHeader h, const std::byte* payload) {
  auto t = of(h, payload);
  t->preamble = std::move(preamble);
  return t;
}

std::shared_ptr<SendTicket> SendTicket::frames(std::string frames) {
  // The last frame is the ticket's own; those before it its preamble.
  std::size_t at = 0, last = 0;
  FrameHeader h;
  while (at + sizeof h <= frames.size()) {
    std::memcpy(&h, frames.data() + at, sizeof h);
    last = at;
    at += sizeof h + h.bytes;
  }
  auto t = std::make_shared<SendTicket>();
  std::memcpy(&t->header, frames.data() + last, sizeof h);
  t->owned = frames.substr(last + sizeof h);
  t->payload = reinterpret_cast<const std::byte*>(t->owned.data());
  frames.resize(last);
  t->preamble = std::move(frames);
  return t;
}

void Connection::close(std::chrono::milliseconds drain) {
  FrameHeader bye;
  bye.magic = magic();
  bye.type = FrameType::bye;
  auto t = send(SendTicket::owning(bye, {}));
  t->done.wait_at_least(1, Clock::now() + drain);
  kill();
}

} // namespace chorus
