// The data plane between two nodes: one TCP connection per pair of nodes. Sends: a writer thread
// drains a queue of frames, so a peer thread hands over a send and goes on reducing what arrives
// meanwhile (sending, receiving and reducing overlap); small frames are written inline by the
// caller when the line is free. Receives: whoever leads the node's Poller (transport/poller.hpp)
// pumps the connection, which reads what has arrived without blocking and hands frames to a
// FrameSink piece by piece, so a consumer can reduce the first megabytes of a large frame while
// the rest is still on the wire.
// Flow control: the writer blocks on a full socket (TCP backpressure) and the schedules bound how
// much one op has in flight; every wait on a connection has a deadline.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <chorus/status.hpp>
#include "core/wait.hpp"
#include "transport/tls_channel.hpp"

namespace chorus {

// p2p_data: payload = a P2PHeader message (`slot` bytes) then the data.
enum class FrameType : uint32_t { hello = 1, announce = 2, data = 3, p2p_data = 5, p2p_ack = 6, bye = 7 };

struct FrameHeader {
  uint32_t magic = kMagic;
  FrameType type = FrameType::data;
  uint32_t group = 0;
  uint32_t slot = 0;   // data: the schedule's slot id; p2p: the pair's sequence number
  uint64_t seq = 0;    // the op's sequence number (p2p: source << 32 | destination)
  uint64_t bytes = 0;  // payload length
  static constexpr uint32_t kMagic = 0x43484f52;  // "CHOR"
};
static_assert(sizeof(FrameHeader) == 32);

// Receives the frames of one connection (called by the thread that pumps it, one at a time).
class FrameSink {
 public:
  virtual ~FrameSink() = default;
  // Where the payload goes (at least h.bytes), or nullptr to read and drop it.
  virtual std::byte* begin_frame(uint32_t node, const FrameHeader& h) = 0;
  // `got` bytes of the payload have arrived so far (called after every read, and once at the end).
  virtual void progress(uint32_t node, const FrameHeader& h, std::size_t got) = 0;
  // The connection died in the middle of this frame's payload: nothing more is written to it.
  virtual void frame_failed(uint32_t node, const FrameHeader& h) = 0;
  // The connection ended: `orderly` after a bye frame, otherwise lost (the reason says how).
  virtual void closed(uint32_t node, bool orderly, const std::string& why) = 0;
};

// One queued send. The payload memory must stay untouched until `done` is set.
struct SendTicket {
  WaitWord done;      // 1: written to the socket; 2: failed or cancelled (the bytes were not all sent)
  FrameHeader header;
  const std::byte* payload = nullptr;
  std::string owned;  // small payloads the ticket owns (control frames)
  std::string preamble;  // whole frames written before this one in the same call (coalescing)
  std::string prefix;    // written between header and payload (counted in header.bytes)
  std::size_t total() const { return preamble.size() + sizeof(FrameHeader) + header.bytes; }
  std::size_t sent = 0;  // bytes of header + payload already written (an inline send may stop short)
  // TLS: records encrypted from the bytes before `sent`, not all written yet (the next writer
  // sends the rest before encrypting more, so records never reorder).
  std::string cipher;
  std::size_t cipher_sent = 0;
  bool written() const { return sent == total() && cipher.empty(); }
};

class Connection {
 public:
  // Takes ownership of a connected socket (and of its TLS session, if any: then every byte is
  // encrypted). Starts the writer thread; reading is pump()'s.
  Connection(int fd, uint32_t node, FrameSink* sink, std::unique_ptr<TlsChannel> tls = nullptr);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Queues a frame. The ticket completes when the bytes are in the socket (or failed).
  std::shared_ptr<SendTicket> post(FrameHeader h, const std::byte* payload);
  std::shared_ptr<SendTicket> post_owned(FrameHeader h, std::string payload);
  // One frame whose payload is `prefix` followed by payload_bytes at `payload` (e.g. a message
  // header and the tensor it describes: never split by another sender's frame).
  std::shared_ptr<SendTicket> post_prefixed(FrameHeader h, std::string prefix, const std::byte* payload,
                                            std::size_t payload_bytes);
  // A frame from the caller's memory, preceded on the wire by `preamble` (complete frames, e.g.
  // an announcement): one system call where there would be two.
  std::shared_ptr<SendTicket> post_after(std::string preamble, FrameHeader h, const std::byte* payload);
  // Whole frames (header and payload each) as they are, in one write.
  std::shared_ptr<SendTicket> post_frames(std::string frames);
  // Sends a bye frame, waits (bounded) for the queue to drain, then shuts the socket.
  void close(std::chrono::milliseconds drain = std::chrono::milliseconds(2000));
  // Shuts the socket at once: blocked writes return, queued sends fail, the next pump() ends the
  // connection. Thread-safe.
  void kill();
  uint32_t node() const { return node_; }
  int fd() const { return fd_; }

  // Reads what has arrived (up to about `budget` bytes) without blocking and hands it to the sink.
  // idle: nothing more to read until the socket has more; more: the budget ran out with bytes
  // still buffered or waiting (pump again without waiting for the socket); ended: the connection
  // has ended (the sink was told, unless we closed or killed it) and must not be pumped again.
  // One thread at a time.
  enum class Pumped { idle, more, ended };
  Pumped pump(std::size_t budget = std::size_t{4} << 20);
  // Once nobody pumps any more (the poller stopped): a frame still arriving fails, so that whoever
  // waits for it lets go.
  void stop_reading();

 private:
  void writer_loop();
  Pumped end_reading(const std::string& why);  // ended, after telling the sink (unless ours)
  Pumped pump_some(std::size_t budget);
  // recv without blocking, or under TLS the plaintext of what has arrived.
  ssize_t read_some(std::byte* p, std::size_t n);
  std::shared_ptr<SendTicket> enqueue(std::shared_ptr<SendTicket> t);
  // Writes from t->sent on; `wait`: block until done, else stop when the socket is full.
  // False on a broken connection.
  bool write_ticket(SendTicket& t, bool wait);
  bool write_ticket_tls(SendTicket& t, bool wait);

  int fd_;
  uint32_t node_;
  FrameSink* sink_;
  std::unique_ptr<TlsChannel> tls_;  // null: plain TCP
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<SendTicket>> queue_;
  bool stopping_ = false;
  bool writing_ = false;  // someone (the writer thread or an inline sender) is writing a frame
  std::atomic<bool> dead_{false};
  std::atomic<bool> got_bye_{false};
  std::thread writer_;

  // Reading state, kept between pumps: buffered bytes in_[pos_, end_), and the frame whose payload
  // is being read (dst_ null: dropped into hole_).
  std::vector<std::byte> in_, hole_;
  std::size_t pos_ = 0, end_ = 0;
  bool in_frame_ = false, ended_ = false;
  FrameHeader cur_{};
  std::byte* dst_ = nullptr;
  std::size_t got_ = 0;
  std::string tls_error_;  // why decryption failed, for the connection's end
};

// Sockets with deadlines. host may be a name or a numeric address.
// A listening socket on host:port (port 0: any free port); returns the fd and the bound port.
Status tcp_listen(const std::string& host, uint16_t port, int& fd, uint16_t& bound);
// Accepts one connection before the deadline (fd -1 and a timeout status otherwise).
Status tcp_accept(int listen_fd, Clock::time_point deadline, int& fd);
// Connects before the deadline, retrying while the other side is not listening yet.
Status tcp_connect(const std::string& host, uint16_t port, Clock::time_point deadline, int& fd);
// Splits "host:port"; false when malformed.
bool split_host_port(const std::string& addr, std::string& host, uint16_t& port);
// Reads or writes exactly n bytes on a blocking socket before the deadline (for handshakes).
Status read_exact(int fd, void* p, std::size_t n, Clock::time_point deadline);
Status write_exact(int fd, const void* p, std::size_t n, Clock::time_point deadline);

} // namespace chorus
