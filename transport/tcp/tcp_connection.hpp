// A Connection (transport/connection.hpp) over one TCP socket, TLS-encrypted when it has a
// TlsChannel; between two processes of one host its bytes go through a ShmChannel's rings instead
// (transport/shm/), the socket then only saying when to wake and when the other side is gone. Sends: a writer thread drains a queue of frames, so a peer thread hands over a send
// and goes on reducing what arrives meanwhile (sending, receiving and reducing overlap); small
// frames are written by the sending thread itself when the line is free. Receives: pump() reads
// the socket without blocking (under TLS, decrypts every whole record that has arrived).
// Flow control: the writer blocks on a full socket (TCP backpressure) and the schedules bound how
// much one op has in flight; every wait on a connection has a deadline.
#pragma once
#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "transport/connection.hpp"
#include "transport/shm/shm_channel.hpp"
#include "transport/tls/tls_channel.hpp"

namespace chorus {

class TcpConnection final : public Connection {
 public:
  // Takes ownership of a connected socket (and of its TLS session, if any: then every byte is
  // encrypted). The writer thread starts with the first frame that cannot be written inline (a
  // connection that cannot start it ends, failing what was queued); reading is pump()'s.
  TcpConnection(int fd, uint32_t node, FrameSink* sink, std::unique_ptr<TlsChannel> tls = nullptr,
                std::unique_ptr<ShmChannel> shm = nullptr);
  ~TcpConnection() override;

  std::shared_ptr<SendTicket> send(std::shared_ptr<SendTicket> t) override;
  void queue(std::shared_ptr<SendTicket> t) override;
  void push() override;
  void kill() override;
  void cut() override;
  bool kill_if(uint32_t magic, bool reset) override;
  bool abandon(const SendTicket& t) override;
  std::optional<std::chrono::milliseconds> since_ack() const override;
  int wait_fd() const override { return fd_; }
  // (Called by whoever leads the poller, as pump() is: ended_ is theirs.) An ended connection is
  // never ready, whatever its ring still holds.
  bool ready() const override { return shm_ && !ended_ && !parked_ && shm_->has_bytes(); }
  bool arm() override { return !shm_ || ended_ || shm_->arm(); }
  void disarm() override {
    if (shm_) shm_->disarm();
  }
  bool spins() const override { return shm_ != nullptr; }
  Pumped pump(std::size_t budget) override;
  void stop_reading() override;
  bool rehome(uint32_t node, uint32_t magic, FrameSink* sink) override;
  bool ended() const override { return dead_.load(); }
  void drop_silently() override;

 private:
  bool queue_locked(const std::shared_ptr<SendTicket>& t);  // false: the connection is closed
  // Takes the head of the queue for the calling thread when the line is free and the frame small,
  // else wakes the writer if it has work; then, without the lock, writes what it took.
  void push_locked(std::unique_lock<std::mutex>& lk);
  void writer_loop();
  // kill() (reset: cut()) under mu_, its failed tickets handed back; end_if only while the
  // connection serves `magic` (none: always).
  // `silent`: drop_silently's end, which leaves the socket and the rings as they are.
  void end_locked(bool reset, std::deque<std::shared_ptr<SendTicket>>& failed, bool silent = false);
  bool end_if(std::optional<uint32_t> magic, bool reset, bool silent = false);
  void wake_writer();  // starts the writer thread if need be, and wakes it
  // Ended, after telling the sink (unless ours): `broke` the connection failed (FrameSink::broken),
  // else the other side's stream ended without a bye.
  Pumped end_reading(const std::string& why, bool broke);
  Pumped read_failed(ssize_t r, bool in_frame);  // end_reading for a read that returned r <= 0
  Pumped pump_some(std::size_t budget);
  // recv without blocking, or under TLS the plaintext of what has arrived.
  ssize_t read_some(std::byte* p, std::size_t n);
  // Plain TCP only: epoll reports the socket once `bytes` have arrived (SO_RCVLOWAT), so a large
  // payload is read in large pieces with few wake-ups rather than one per segment.
  void wake_at(std::size_t bytes);
  // Writes from t->sent on; `wait`: block until done, else stop when the socket is full.
  // False on a broken connection.
  bool write_ticket(SendTicket& t, bool wait);
  bool write_ticket_tls(SendTicket& t, bool wait);
  bool write_ticket_shm(SendTicket& t, bool wait);

  int fd_;
  FrameSink* sink_;
  std::unique_ptr<TlsChannel> tls_;  // null: plain TCP
  std::unique_ptr<ShmChannel> shm_;  // set: the bytes go through shared memory
  // The queue and the flags below; never held while writing or encrypting, and nothing else is
  // locked under it (callers may hold their own locks when they queue(): it comes after them).
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<SendTicket>> queue_;
  bool stopping_ = false;
  bool shut_ = false;     // the socket was shut down (an end does it once; drop_silently does not)
  bool writing_ = false;  // someone (the writer thread or an inline sender) is writing a frame
  std::shared_ptr<SendTicket> current_;  // that frame, while writing_ (abandon)
  bool abandoned_ = false;  // ended by abandon(): for the epoch it serves, a broken link
  std::atomic<bool> dead_{false};
  std::atomic<bool> got_bye_{false};
  // Started the first time a frame cannot be written inline (wake_writer): most of a host's
  // connections never need it, and a mesh of N nodes would start N - 1 threads in every process.
  std::thread writer_;
  std::once_flag writer_once_;

  // Reading state, kept between pumps: buffered bytes in_[pos_, end_), and the frame whose payload
  // is being read (dst_ null: dropped into hole_).
  // Not zeroed (new T[], not a vector): a mesh makes a connection per node, and zeroing them cost
  // a shrink's 7 processes ~0.6 ms of CPU each.
  std::unique_ptr<std::byte[]> in_, hole_;
  std::size_t pos_ = 0, end_ = 0;
  bool in_frame_ = false, ended_ = false;
  bool parked_ = false;  // at a later epoch's frame, until rehome
  FrameHeader cur_{};
  std::byte* dst_ = nullptr;
  std::size_t got_ = 0;
  std::size_t lowat_ = 1;  // the socket's SO_RCVLOWAT
  std::string tls_error_;  // why decryption failed, for the connection's end
};

// The factory the global client uses for a connection between two hosts.
inline std::unique_ptr<Connection> tcp_connection(int fd, uint32_t node, FrameSink* sink,
                                                  std::unique_ptr<TlsChannel> tls = nullptr) {
  return std::make_unique<TcpConnection>(fd, node, sink, std::move(tls));
}
// And for two processes of one host, once their socket's hello is done and the segment agreed.
inline std::unique_ptr<Connection> shm_connection(int fd, uint32_t node, FrameSink* sink,
                                                  std::unique_ptr<ShmChannel> shm) {
  return std::make_unique<TcpConnection>(fd, node, sink, nullptr, std::move(shm));
}

} // namespace chorus
