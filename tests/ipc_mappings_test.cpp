// cuda/ipc_mappings.hpp with the driver played by a double: which handles are open, what an open
// answers when the memory is mapped already, and what gets closed.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <thread>

#include "cuda/ipc_mappings.hpp"

namespace chorus::gpu {
namespace {

IpcHandle handle(unsigned char n) {
  IpcHandle h{};
  h[0] = n;
  return h;
}

// The driver: a handle names a piece of memory (`memory_of`); a piece maps once per process, and
// an open of another handle to a mapped piece is refused as already mapped.
struct Driver {
  std::map<unsigned char, int> memory_of;
  std::map<int, void*> mapped;  // piece -> base
  std::multiset<void*> closed;
  int opens = 0;
  uintptr_t next = 0x1000;

  IpcMappings::Calls calls() {
    return {[this](int, const IpcHandle& h, void** base, bool* already) -> Status {
              ++opens;
              const int piece = memory_of.at(h[0]);
              if (mapped.count(piece)) {
                *already = true;
                return {Errc::device_error, "cudaIpcOpenMemHandle: cudaErrorAlreadyMapped"};
              }
              *base = mapped[piece] = reinterpret_cast<void*>(next += 0x1000);
              return Status::ok();
            },
            [this](int, void* base) {
              closed.insert(base);
              for (auto it = mapped.begin(); it != mapped.end(); ++it)
                if (it->second == base) {
                  mapped.erase(it);
                  break;
                }
            }};
  }
};

Clock::time_point soon() { return Clock::now() + std::chrono::seconds(5); }

TEST(IpcMappings, AnOpenHandleIsLookedUpNotOpenedAgain) {
  Driver d;
  d.memory_of = {{1, 10}, {2, 20}};
  IpcMappings m(d.calls(), 8);
  void *a = nullptr, *b = nullptr, *a2 = nullptr;
  ASSERT_TRUE(m.acquire(0, handle(1), &a, soon()).is_ok());
  ASSERT_TRUE(m.acquire(0, handle(2), &b, soon()).is_ok());
  m.release(0, handle(1));
  m.release(0, handle(2));
  ASSERT_TRUE(m.acquire(0, handle(1), &a2, soon()).is_ok());
  EXPECT_EQ(a2, a);
  EXPECT_NE(a, b);
  EXPECT_EQ(d.opens, 2);
  EXPECT_EQ(m.mapped(), 2u);
  EXPECT_EQ(m.held(), 1u);
}

// The exporter freed a buffer and its memory came back in a new one: the new handle's open is
// refused while the old mapping stays; the idle mappings are closed and the open succeeds.
TEST(IpcMappings, AStaleMappingOfTheSameMemoryIsClosedAndTheOpenRetried) {
  Driver d;
  d.memory_of = {{1, 10}, {2, 20}, {3, 10}};  // handle 3: piece 10 again, after handle 1's buffer was freed
  IpcMappings m(d.calls(), 8);
  void *old_base = nullptr, *live = nullptr, *fresh = nullptr;
  ASSERT_TRUE(m.acquire(0, handle(1), &old_base, soon()).is_ok());
  m.release(0, handle(1));
  ASSERT_TRUE(m.acquire(0, handle(2), &live, soon()).is_ok());  // held by the op in flight
  Status st = m.acquire(0, handle(3), &fresh, soon());
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  EXPECT_EQ(d.closed, (std::multiset<void*>{old_base}));  // not the held one
  EXPECT_EQ(m.stale_closed(), 1u);
  EXPECT_EQ(d.mapped.at(10), fresh);
  EXPECT_EQ(d.mapped.at(20), live);
  EXPECT_EQ(m.mapped(), 2u);
  EXPECT_EQ(d.opens, 4);  // 1, 2, 3 refused, 3 again
}

// Where the collision is with a mapping an op holds, nothing is closed and the error stands.
TEST(IpcMappings, ACollisionWithAHeldMappingIsTheOpsError) {
  Driver d;
  d.memory_of = {{1, 10}, {3, 10}};
  IpcMappings m(d.calls(), 8);
  void *a = nullptr, *b = nullptr;
  ASSERT_TRUE(m.acquire(0, handle(1), &a, soon()).is_ok());
  Status st = m.acquire(0, handle(3), &b, soon());
  EXPECT_EQ(st.code(), Errc::device_error);
  EXPECT_NE(st.message().find("AlreadyMapped"), std::string::npos) << st.to_string();
  EXPECT_TRUE(d.closed.empty());
  EXPECT_EQ(m.mapped(), 1u);
  m.release(0, handle(1));
  ASSERT_TRUE(m.acquire(0, handle(3), &b, soon()).is_ok());  // once let go, the stale one yields
}

// Past the bound the least recently used idle mappings close; held ones never do.
TEST(IpcMappings, TheLeastRecentlyUsedIdleMappingsCloseFirstAndHeldOnesNever) {
  Driver d;
  for (unsigned char i = 1; i <= 6; ++i) d.memory_of[i] = i;
  IpcMappings m(d.calls(), 2);
  std::map<int, void*> base;
  for (unsigned char i = 1; i <= 4; ++i) ASSERT_TRUE(m.acquire(0, handle(i), &base[i], soon()).is_ok());
  EXPECT_TRUE(d.closed.empty());  // all held
  for (unsigned char i = 1; i <= 4; ++i) m.release(0, handle(i));
  void* p = nullptr;
  ASSERT_TRUE(m.acquire(0, handle(2), &p, soon()).is_ok());  // 2 used again: newest
  m.release(0, handle(2));
  ASSERT_TRUE(m.acquire(0, handle(5), &p, soon()).is_ok());  // held; idle 1, 2, 3, 4: keep 2 of them
  EXPECT_EQ(d.closed, (std::multiset<void*>{base[1], base[3]}));
  EXPECT_EQ(m.mapped(), 3u);
}

// Threads after the same handle at once open it once and share the mapping.
TEST(IpcMappings, ConcurrentAcquiresOfOneHandleOpenItOnce) {
  Driver d;
  d.memory_of = {{1, 10}};
  std::mutex mu;
  auto calls = d.calls();
  auto open = calls.open;
  calls.open = [&](int dev, const IpcHandle& h, void** b, bool* a) {
    std::this_thread::yield();
    std::lock_guard<std::mutex> g(mu);
    return open(dev, h, b, a);
  };
  IpcMappings m(calls, 8);
  std::vector<void*> got(8);
  std::vector<std::thread> ts;
  std::vector<Status> st(8);
  for (int i = 0; i < 8; ++i) ts.emplace_back([&, i] { st[i] = m.acquire(0, handle(1), &got[i], soon()); });
  for (auto& t : ts) t.join();
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(st[i].is_ok()) << i << ": " << st[i].to_string();
    EXPECT_EQ(got[i], got[0]);
  }
  EXPECT_EQ(d.opens, 1);
  for (int i = 0; i < 8; ++i) m.release(0, handle(1));
  EXPECT_EQ(m.held(), 0u);
}

// The GPU layer's teardown closes every mapping no op holds, and none an op holds.
TEST(IpcMappings, CloseIdleClosesEveryMappingNoOpHolds) {
  Driver d;
  d.memory_of = {{1, 10}, {2, 20}, {3, 30}};
  IpcMappings m(d.calls(), 8);
  void *a = nullptr, *b = nullptr, *c = nullptr;
  ASSERT_TRUE(m.acquire(0, handle(1), &a, soon()).is_ok());
  ASSERT_TRUE(m.acquire(1, handle(2), &b, soon()).is_ok());
  ASSERT_TRUE(m.acquire(0, handle(3), &c, soon()).is_ok());
  m.release(0, handle(1));
  m.release(1, handle(2));
  EXPECT_EQ(m.close_idle(), 2u);
  EXPECT_EQ(d.closed, (std::multiset<void*>{a, b}));
  EXPECT_EQ(m.mapped(), 1u);
  EXPECT_EQ(m.held(), 1u);
  m.release(0, handle(3));
  EXPECT_EQ(m.close_idle(), 1u);
  EXPECT_EQ(m.mapped(), 0u);
}

} // namespace
} // namespace chorus::gpu
