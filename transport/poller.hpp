// Reads every data connection of a node. Nobody owns the reading: a thread that waits for
// something from the network leads the poller (epoll over all connections, pumping whatever
// arrives for anyone) until what it waits for is there. The bytes thus reach the waiting thread
// itself, one wake-up where a reader thread handing them over costs two, which dominates small
// ops when several node processes share few cores.
// A background thread leads when no waiting thread has for a moment (kIdle), so frames are read
// and closed connections noticed at any time; it gives the lead back as soon as a thread waits.
// Whatever sets a word a leader waits on wakes it through the word's watcher eventfd.
#pragma once
#include <atomic>
#include <chrono>
#include <mutex>
#include <vector>

#include "core/spare_threads.hpp"
#include "core/wait.hpp"
#include "transport/connection.hpp"

namespace chorus {

class Poller {
 public:
  Poller();
  ~Poller();
  Poller(const Poller&) = delete;
  Poller& operator=(const Poller&) = delete;

  // Adds the connections (before start) and starts the background thread. A waiting thread that
  // leads looks at the shared-memory connections among them, as `patience` says (spinning, or
  // where the host's threads outnumber its cores yielding between looks: the writer we wait for
  // may need this very core), before it sleeps in epoll; and, for a small receive, asks the
  // sockets again the same way (reading a lone socket directly) for socket_spin_budget().
  void start(const std::vector<Connection*>& conns, Patience patience = {});
  // After stop() nothing pumps any more (the connections may then be destroyed); waits still end
  // by their words or deadlines. It does not wait for the background thread to end (the
  // destructor does). Idempotent.
  void stop();

  // Until w.value >= target (true) or the deadline (false), leading the reading meanwhile when
  // nobody else does. Must not be called with a lock that a FrameSink callback takes.
  // `spin`: a leader may poll the sockets for a moment before it sleeps (worth it for small
  // waits; a large transfer needs the cores for its copies).
  bool wait(WaitWord& w, uint32_t target, Clock::time_point deadline, bool spin = true);
  // The same, until w.value is no longer `seen` (a word that WaitWord::advance moves on, wrapping).
  bool wait_change(WaitWord& w, uint32_t seen, Clock::time_point deadline, bool spin = true);

  static constexpr std::chrono::milliseconds kIdle{2};

 private:
  template <class Reached>
  bool wait_until(WaitWord& w, Reached reached, Clock::time_point deadline, bool spin);
  // Pumps what arrives until `done` or `until` (holding lead_mu_).
  template <class Done>
  void lead(WaitWord* watched, Done done, Clock::time_point until, bool spin);
  // After a pump of c: pumped again next round, or (ended) forgotten.
  void settle(Connection* c, Connection::Pumped r);
  void background();
  void nudge_sleepers();

  int ep_ = -1, efd_ = -1;
  // The lead: held by whoever pumps, so the sinks' callbacks run under it; the outermost lock of
  // the data plane (the order: actors/global_client/global_client.hpp). sleepers_mu_ is a leaf.
  std::mutex lead_mu_;
  std::vector<Connection*> ready_;        // pump again without waiting for epoll (under lead_mu_)
  std::vector<Connection*> spinning_;     // connections that tell ready() without a system call
  bool sockets_ = false;                  // some connections are only heard through their sockets
  Connection* lone_socket_ = nullptr;     // the only such one, while it is the only one (under lead_mu_)
  Patience patience_;
  bool stopped_ = false;                  // under lead_mu_
  std::atomic<bool> stopping_{false};
  std::atomic<int> want_{0};              // threads in wait() that do not lead
  std::atomic<int64_t> last_led_{0};      // when a waiting thread last stopped leading (ns)
  std::mutex sleepers_mu_;
  std::vector<WaitWord*> sleepers_;       // words of waiting threads that do not lead
  WaitWord standby_;                      // the background thread sleeps on it
  SpareJob bg_;  // the background thread's work
};

} // namespace chorus
