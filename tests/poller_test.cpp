// The data plane's poller (transport/poller.hpp) over real loopback TCP connections: a waiting thread
// reads its own frames (and everyone else's), a word set by another thread wakes a leader that
// sleeps in epoll (which /proc tells from a sleep on a futex), the background thread reads when nobody waits, waiters that do not lead are
// served, frames larger than one pump's budget arrive whole, queued frames keep their order, a
// closed connection is reported, and after stop() nothing is read; a payload's last bytes wake
// the reader however few they are, and so does the next frame; a waiter that polls (spinning or
// yielding) reads one socket or several and notices a socket's end.
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "transport/poller.hpp"
#include "transport/socket.hpp"
#include "transport/tcp/tcp_connection.hpp"

namespace chorus {
namespace {

using namespace std::chrono_literals;

// Counts complete frames (word = how many) and keeps their bytes.
class CountingSink : public FrameSink {
 public:
  std::byte* begin_frame(uint32_t, const FrameHeader& h) override {
    std::lock_guard<std::mutex> lk(mu);
    auto& f = frames[h.slot];
    f.assign(std::max<std::size_t>(h.bytes, 1), std::byte{0});
    return f.data();
  }
  void progress(uint32_t, const FrameHeader& h, std::size_t got) override {
    if (got != h.bytes) return;
    {
      std::lock_guard<std::mutex> lk(mu);
      order.push_back(h.slot);
    }
    done.set(done.value.load() + 1);
  }
  void frame_failed(uint32_t, const FrameHeader&) override { failed = true; }
  void closed(uint32_t, bool orderly_end, const std::string&) override {
    orderly = orderly_end;
    ended.set(1);
  }
  std::mutex mu;
  std::map<uint32_t, std::vector<std::byte>> frames;
  std::vector<uint32_t> order;  // slots, as their frames completed
  WaitWord done, ended;
  std::atomic<bool> failed{false}, orderly{false};
};

struct Link {
  int a = -1, b = -1;
};

Link tcp_pair() {
  int lfd = -1;
  uint16_t port = 0;
  EXPECT_TRUE(tcp_listen("127.0.0.1", 0, lfd, port).is_ok());
  Link l;
  std::thread t([&] { EXPECT_TRUE(tcp_connect("127.0.0.1", port, Clock::now() + 5s, l.a).is_ok()); });
  EXPECT_TRUE(tcp_accept(lfd, Clock::now() + 5s, l.b).is_ok());
  t.join();
  ::close(lfd);
  return l;
}

FrameHeader data_frame(uint32_t slot, std::size_t bytes) {
  FrameHeader h;
  h.slot = slot;
  h.bytes = bytes;
  return h;
}

// What /proc/self/task/TID/FILE says, "" when it cannot be read.
std::string task_file(pid_t tid, const char* file) {
  std::ifstream f("/proc/self/task/" + std::to_string(tid) + "/" + file);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

bool is_epoll_wait(long syscall_nr) {
#ifdef SYS_epoll_wait  // not on every architecture (aarch64 has only the pwait forms)
  if (syscall_nr == SYS_epoll_wait) return true;
#endif
#ifdef SYS_epoll_pwait2
  if (syscall_nr == SYS_epoll_pwait2) return true;
#endif
  return syscall_nr == SYS_epoll_pwait;
}

// Whether thread `tid` of this process sleeps in epoll_wait: asleep (state S in stat), and the
// system call it sleeps in is an epoll wait (syscall) or the kernel function it waits in is
// epoll's (wchan: ep_poll, or do_epoll_wait on newer kernels). State S alone would also hold for a
// thread asleep on a futex or a mutex.
bool sleeps_in_epoll(pid_t tid) {
  const std::string stat = task_file(tid, "stat");
  const auto end_of_name = stat.rfind(')');
  if (end_of_name == std::string::npos || end_of_name + 2 >= stat.size() || stat[end_of_name + 2] != 'S') return false;
  const std::string call = task_file(tid, "syscall");  // "232 0x3 ..." while blocked in syscall 232
  if (!call.empty() && std::isdigit(static_cast<unsigned char>(call[0])) && is_epoll_wait(std::stol(call))) return true;
  const std::string wchan = task_file(tid, "wchan");
  return wchan == "ep_poll" || wchan == "do_epoll_wait";
}

// Until thread `tid` leads a poller for `w` (w's watcher is set) and sleeps in epoll_wait; false at
// the deadline. A poll: where the thread sleeps is known only to the kernel.
bool sleeps_leading(const WaitWord& w, pid_t tid, Clock::time_point deadline) {
  while (Clock::now() < deadline) {
    if (w.watcher.load() >= 0 && sleeps_in_epoll(tid)) return true;
    std::this_thread::yield();
  }
  return false;
}

// Two connected nodes, each side read by its own poller (declared last: stopped first).
struct PolledPair {
  Link l = tcp_pair();
  CountingSink sa, sb;
  TcpConnection a{l.a, 1, &sa}, b{l.b, 0, &sb};
  Poller pa, pb;
  explicit PolledPair(Patience b_patience = {}) {  // how b's waiters pass the time before sleeping
    pa.start({&a});
    pb.start({&b}, b_patience);
  }
};

// The check the test below relies on: a thread asleep on a futex (a WaitWord's wait) is asleep,
// but not in epoll_wait.
TEST(Poller, ASleepOnAFutexIsNotTakenForASleepInEpoll) {
  WaitWord word;
  std::atomic<pid_t> tid{0};
  std::thread sleeper([&] {
    tid = gettid();
    EXPECT_TRUE(word.wait_at_least(1, Clock::now() + 30s));
  });
  while (tid.load() == 0) std::this_thread::yield();
  // Until it sleeps in the futex (after its spin), then the epoll check must say no.
  const auto until = Clock::now() + 10s;
  bool in_futex = false;
  while (!in_futex && Clock::now() < until) {
    const std::string call = task_file(tid, "syscall");
    in_futex = !call.empty() && std::isdigit(static_cast<unsigned char>(call[0])) && std::stol(call) == SYS_futex;
    if (!in_futex) std::this_thread::yield();
  }
  EXPECT_TRUE(in_futex) << "the waiting thread never slept on its futex";
  EXPECT_FALSE(sleeps_in_epoll(tid));
  word.set(1);
  sleeper.join();
}

// A word that counts events for as long as a process lives (the point-to-point mailbox's) wraps
// past its top rather than stopping there, where every wait for "more" would return at once: its
// waiters wait for a change. The top itself stays for good.
TEST(Poller, AWordThatCountsEventsWrapsAndItsWaitersWaitForAChange) {
  Poller poller;
  poller.start({});
  WaitWord word;
  word.value = kWordTop - 1;
  EXPECT_FALSE(poller.wait_change(word, kWordTop - 1, Clock::now() + 20ms)) << "nothing changed";
  std::thread mover([&] { word.advance(); });
  EXPECT_TRUE(poller.wait_change(word, kWordTop - 1, Clock::now() + 30s));
  mover.join();
  EXPECT_EQ(word.value.load(), 0u) << "it wraps, skipping the top";
  word.advance();
  EXPECT_EQ(word.value.load(), 1u);
  word.set(kWordTop);
  word.advance();
  EXPECT_EQ(word.value.load(), kWordTop) << "the top is for good";
  poller.stop();
}

TEST(Poller, AWaiterReadsItsFramesAndAWordSetElsewhereWakesTheLeader) {
  PolledPair pp;
  auto& [l, sa, sb, a, b, pa, pb] = pp;
  const std::string small(1000, 'x');
  for (uint32_t k = 0; k < 3; ++k) a.send(SendTicket::of(data_frame(k, small.size()), reinterpret_cast<const std::byte*>(small.data())));
  ASSERT_TRUE(pb.wait(sb.done, 3, Clock::now() + 5s));
  EXPECT_EQ(sb.frames.size(), 3u);
  EXPECT_EQ(std::memcmp(sb.frames[2].data(), small.data(), small.size()), 0);

  // A word nobody on the network touches, set by another thread while we lead (sleeping in epoll):
  // the set wakes us through the eventfd. Without it the leader would notice only at its next
  // 10 ms look, so the median delay over 21 tries tells the two apart. The setter sets the word
  // once we lead (the word has our watcher) and sleep in epoll_wait.
  WaitWord other;
  const pid_t leader = gettid();
  std::vector<Clock::duration> delays;
  for (uint32_t k = 1; k <= 21; ++k) {
    std::atomic<int64_t> set_at{0};
    std::thread setter([&] {
      EXPECT_TRUE(sleeps_leading(other, leader, Clock::now() + 5s));
      set_at = Clock::now().time_since_epoch().count();
      other.set(k);
    });
    EXPECT_TRUE(pb.wait(other, k, Clock::now() + 5s));
    const auto woke = Clock::now().time_since_epoch().count();
    setter.join();
    delays.push_back(Clock::duration(woke - set_at.load()));
  }
  std::nth_element(delays.begin(), delays.begin() + 10, delays.end());
  EXPECT_LT(delays[10], 3ms);
  // And a deadline is kept when nothing comes.
  const auto t1 = Clock::now();
  EXPECT_FALSE(pb.wait(other, 22, Clock::now() + 100ms));
  EXPECT_GE(Clock::now() - t1, 90ms);
  EXPECT_LT(Clock::now() - t1, 2s);
  pa.stop();
  pb.stop();
}

TEST(Poller, TheBackgroundThreadReadsWhenNobodyWaitsAndServesWaitersThatDoNotLead) {
  PolledPair pp;
  auto& [l, sa, sb, a, b, pa, pb] = pp;
  // Nobody waits on b's side: the background thread must read (sb.done rises by itself).
  const std::string big(std::size_t{9} << 20, 'y');  // over two pumps' budget
  a.send(SendTicket::of(data_frame(7, big.size()), reinterpret_cast<const std::byte*>(big.data())));
  ASSERT_TRUE(sb.done.wait_at_least(1, Clock::now() + 10s));
  EXPECT_EQ(std::memcmp(sb.frames[7].data(), big.data(), big.size()), 0);

  // Several threads wait at once: one leads, the others are woken by what it pumps.
  std::vector<std::thread> waiters;
  std::atomic<int> ok{0};
  for (int t = 0; t < 3; ++t)
    waiters.emplace_back([&, t] { ok += pb.wait(sb.done, 2 + static_cast<uint32_t>(t), Clock::now() + 10s); });
  const std::string small(100, 'z');
  for (uint32_t k = 0; k < 3; ++k) a.send(SendTicket::of(data_frame(10 + k, small.size()), reinterpret_cast<const std::byte*>(small.data())));
  for (auto& w : waiters) w.join();
  EXPECT_EQ(ok.load(), 3);
  pa.stop();
  pb.stop();
}

const std::byte* bytes(const std::string& s) { return reinterpret_cast<const std::byte*>(s.data()); }

TEST(Poller, QueuedFramesLeaveInTheirOrderOncePushedAndAKilledConnectionFailsThemAtOnce) {
  PolledPair pp;
  auto& [l, sa, sb, a, b, pa, pb] = pp;
  // As under a caller's lock: a large frame (the writer thread's) and small ones behind it (which
  // a sending thread writes itself when the line is free) take their places, then one push. The
  // small ones must not overtake the large one, and a send() after them goes last.
  const std::string big(std::size_t{3} << 20, 'b'), small(64, 's');
  auto first = SendTicket::of(data_frame(1, big.size()), bytes(big));
  a.queue(first);
  for (uint32_t k = 2; k <= 4; ++k) a.queue(SendTicket::of(data_frame(k, small.size()), bytes(small)));
  a.push();
  a.send(SendTicket::owning(data_frame(5, 0), small));
  ASSERT_TRUE(pb.wait(sb.done, 5, Clock::now() + 5s));
  {
    std::lock_guard<std::mutex> lk(sb.mu);
    EXPECT_EQ(sb.order, (std::vector<uint32_t>{1, 2, 3, 4, 5}));
    EXPECT_EQ(std::memcmp(sb.frames[1].data(), big.data(), big.size()), 0);
    EXPECT_EQ(std::memcmp(sb.frames[5].data(), small.data(), small.size()), 0);
  }
  EXPECT_TRUE(first->done.wait_at_least(1, Clock::now() + 5s));
  EXPECT_EQ(first->done.value.load(), 1u);
  // Killed: whatever is queued or sent fails at once (nothing waits for a writer that is gone).
  a.kill();
  auto late = SendTicket::of(data_frame(6, small.size()), bytes(small));
  a.queue(late);
  EXPECT_EQ(late->done.value.load(), 2u);
  EXPECT_EQ(a.send(SendTicket::owning(data_frame(7, 0), small))->done.value.load(), 2u);
  ASSERT_TRUE(pb.wait(sb.ended, 1, Clock::now() + 5s));
  EXPECT_FALSE(sb.orderly.load());
  pa.stop();
  pb.stop();
}

TEST(Poller, AClosedConnectionIsReportedAndNothingIsReadAfterStop) {
  Link l = tcp_pair();
  CountingSink sa, sb;
  auto a = std::make_unique<TcpConnection>(l.a, 1, &sa);
  TcpConnection b(l.b, 0, &sb);
  Poller pa, pb;
  pa.start({a.get()});
  pb.start({&b});
  a->close();  // bye, then shut
  ASSERT_TRUE(pb.wait(sb.ended, 1, Clock::now() + 5s));
  EXPECT_TRUE(sb.orderly.load());
  pa.stop();
  a.reset();
  // A stopped poller reads nothing; a wait still ends by its deadline.
  Link m = tcp_pair();
  CountingSink sc, sd;
  TcpConnection c(m.a, 1, &sc), d(m.b, 0, &sd);
  Poller pd;
  pd.start({&d});
  pd.stop();
  const std::string small(100, 'q');
  c.send(SendTicket::of(data_frame(1, small.size()), reinterpret_cast<const std::byte*>(small.data())));
  const auto t0 = Clock::now();
  EXPECT_FALSE(pd.wait(sd.done, 1, Clock::now() + 200ms));
  EXPECT_LT(Clock::now() - t0, 2s);
  EXPECT_EQ(sd.done.value.load(), 0u);
  pb.stop();
}

void write_all(int fd, const void* p, std::size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t r = ::send(fd, c, n, MSG_NOSIGNAL);
    ASSERT_GT(r, 0) << std::strerror(errno);
    c += r;
    n -= static_cast<std::size_t>(r);
  }
}

// Inside a payload the socket wakes the reader only once a good piece has arrived (SO_RCVLOWAT):
// never more than what the frame still lacks, and between frames for one byte again. A wrong
// threshold shows as a reader asleep in epoll forever while the bytes it needs sit in the socket.
TEST(Poller, APayloadsLastBytesWakeTheReaderHoweverFewAndSoDoesTheNextFrame) {
  Link l = tcp_pair();
  CountingSink sb;
  TcpConnection b(l.b, 0, &sb);
  Poller pb;
  pb.start({&b});
  const std::string body(std::size_t{100} << 10, 'p');
  const std::size_t part = std::size_t{60} << 10;
  std::atomic<pid_t> tid{0};
  std::atomic<bool> got{false};
  std::thread reader([&] {
    tid = gettid();
    got = pb.wait(sb.done, 1, Clock::now() + 10s);
  });
  const FrameHeader h = data_frame(3, body.size());
  write_all(l.a, &h, sizeof h);
  write_all(l.a, body.data(), part);
  // The reader has read what came (the header, maybe some of the 60 KiB) and sleeps in epoll;
  // the remaining 40 KiB must wake it, whatever it had read.
  while (tid.load() == 0) std::this_thread::yield();
  const bool asleep = sleeps_leading(sb.done, tid.load(), Clock::now() + 5s);
  write_all(l.a, body.data() + part, body.size() - part);
  reader.join();
  ASSERT_TRUE(asleep) << "the reader never slept in epoll";
  ASSERT_TRUE(got.load());
  EXPECT_EQ(std::memcmp(sb.frames[3].data(), body.data(), body.size()), 0);
  // A small frame after it, written while nobody waits, then awaited: the socket wakes for it.
  const std::string small(10, 's');
  const FrameHeader h2 = data_frame(4, small.size());
  write_all(l.a, &h2, sizeof h2);
  write_all(l.a, small.data(), small.size());
  ASSERT_TRUE(pb.wait(sb.done, 2, Clock::now() + 5s));
  EXPECT_EQ(std::memcmp(sb.frames[4].data(), small.data(), small.size()), 0);
  pb.stop();
  ::close(l.a);
}

// A waiter that may poll (threads no more than cores: spinning; else yielding between looks) reads
// its frames from a lone socket (which it reads directly) and from several (through epoll), and a
// lone socket ending while it polls is reported and forgotten: later waits end by their deadline.
TEST(Poller, AWaiterThatPollsReadsItsFramesFromOneSocketOrSeveralAndNoticesAnEnd) {
  const Patience spinning{std::chrono::microseconds(20), {}}, yielding{{}, std::chrono::microseconds(200)};
  for (const Patience& patience : {spinning, yielding}) {
    SCOPED_TRACE(patience.spin.count() > 0 ? "spinning" : "yielding");
    const std::string small(500, 'm');
    {  // one socket
      PolledPair pp(patience);
      auto& [l, sa, sb, a, b, pa, pb] = pp;
      std::thread sender([&] {
        for (uint32_t k = 0; k < 50; ++k) a.send(SendTicket::of(data_frame(k, small.size()), bytes(small)));
      });
      for (uint32_t k = 1; k <= 50; ++k) ASSERT_TRUE(pb.wait(sb.done, k, Clock::now() + 5s)) << k;
      sender.join();
      {
        std::lock_guard<std::mutex> lk(sb.mu);
        ASSERT_EQ(sb.order.size(), 50u);
        for (uint32_t k = 0; k < 50; ++k) EXPECT_EQ(sb.order[k], k);
        EXPECT_EQ(std::memcmp(sb.frames[49].data(), small.data(), small.size()), 0);
      }
      a.close();
      ASSERT_TRUE(pb.wait(sb.ended, 1, Clock::now() + 5s));
      EXPECT_TRUE(sb.orderly.load());
      const auto t0 = Clock::now();
      EXPECT_FALSE(pb.wait(sb.done, 51, Clock::now() + 100ms));
      EXPECT_LT(Clock::now() - t0, 2s);
      pa.stop();
      pb.stop();
    }
    {  // two sockets into one poller
      Link l1 = tcp_pair(), l2 = tcp_pair();
      CountingSink s1, s2, sb;
      TcpConnection a1(l1.a, 2, &s1), a2(l2.a, 2, &s2), b1(l1.b, 0, &sb), b2(l2.b, 1, &sb);
      Poller p1, p2, pb;
      p1.start({&a1});
      p2.start({&a2});
      pb.start({&b1, &b2}, patience);
      std::thread sender([&] {
        for (uint32_t k = 0; k < 20; ++k) {
          a1.send(SendTicket::of(data_frame(k, small.size()), bytes(small)));
          a2.send(SendTicket::of(data_frame(100 + k, small.size()), bytes(small)));
        }
      });
      ASSERT_TRUE(pb.wait(sb.done, 40, Clock::now() + 5s));
      sender.join();
      {
        std::lock_guard<std::mutex> lk(sb.mu);  // not across stop(): the pumps take it under the lead
        EXPECT_EQ(sb.frames.size(), 40u);
        EXPECT_EQ(std::memcmp(sb.frames[119].data(), small.data(), small.size()), 0);
      }
      p1.stop();
      p2.stop();
      pb.stop();
    }
  }
}

} // namespace
} // namespace chorus
