// The local server core: registration, finish, reset, close, and failing everything in flight.
#include "actors/local_server/server_core.hpp"

#include <algorithm>

namespace chorus {

LocalServerCore::~LocalServerCore() {
  std::lock_guard<std::mutex> lk(mu_);
  fail_everyone(Status(Errc::reset, "the local server stopped"));
}

void LocalServerCore::on_register(Call call) {
  std::lock_guard<std::mutex> lk(mu_);
  if (closed_) return call.reply->complete(*closed_);
  std::string err;
  auto r = decode_register(call.message, err);
  if (!r) return call.reply->complete(garbled(err));
  if (r->protocol_version != protocol_version())
    return call.reply->complete({Errc::invalid_argument, "peer " + std::to_string(r->peer) +
                                    " speaks protocol " + std::to_string(r->protocol_version) +
                                    ", this server speaks " + std::to_string(protocol_version())});
  if (auto s = r->config.validate(); !s) return call.reply->complete(s);
  if (config_) {
    if (auto d = config_->first_difference(r->config); !d.empty())
      return call.reply->complete({Errc::config_mismatch, "peer " + std::to_string(r->peer) +
                                      " registers with a config that differs from the first peer's: " + d});
  }
  const uint32_t n = r->config.num_devices;
  if (r->peer >= n)
    return call.reply->complete({Errc::invalid_argument, "peer id " + std::to_string(r->peer) +
                                    " is outside [0, " + std::to_string(n) + ")"});
  if (!config_) {
    config_ = std::make_shared<const Config>(r->config);
    registered_.assign(n, false);
    finished_.assign(n, false);
    std::vector<uint32_t> world(n);
    for (uint32_t i = 0; i < n; ++i) world[i] = i;
    groups_[0] = Group{world, std::vector<bool>(n, false)};
  }
  if (finished_[r->peer])
    return call.reply->complete({Errc::finished, "peer " + std::to_string(r->peer) +
                                    " has finished; it may register again once every peer has finished"});
  if (registered_[r->peer])
    return call.reply->complete({Errc::register_twice, "peer " + std::to_string(r->peer) + " is already registered"});
  registered_[r->peer] = true;
  call.reply->epoch = epoch_;
  call.reply->complete(Status::ok());
}


Status LocalServerCore::check_caller(uint32_t peer, uint64_t epoch) const {
  if (!config_ || peer >= registered_.size() || (!registered_[peer] && !finished_[peer]))
    return {Errc::not_registered, "peer " + std::to_string(peer) + " called before registering"};
  if (epoch != epoch_)
    return {Errc::not_registered, "peer " + std::to_string(peer) +
                                      "'s registration belongs to a collective that was reset; register again"};
  if (finished_[peer]) return {Errc::finished, "peer " + std::to_string(peer) + " has already finished"};
  return Status::ok();
}

void LocalServerCore::on_finish(Call call) {
  std::lock_guard<std::mutex> lk(mu_);
  if (closed_) return call.reply->complete(*closed_);
  std::string err;
  auto f = decode_finish(call.message, err);
  if (!f) return call.reply->complete(garbled(err));
  const uint32_t* peer = &f->peer;
  if (config_ && *peer < finished_.size() && finished_[*peer] && f->epoch == epoch_)
    return call.reply->complete({Errc::unregister_twice, "peer " + std::to_string(*peer) + " finished twice"});
  if (auto s = check_caller(*peer, f->epoch); !s) return call.reply->complete(s);
  finished_[*peer] = true;
  registered_[*peer] = false;
  // Once everyone has finished, the collective is over and a new one may register.
  if (std::all_of(finished_.begin(), finished_.end(), [](bool f) { return f; })) {
    fail_everyone(Status(Errc::finished, "every peer has finished"));
    clear();
  }
  call.reply->complete(Status::ok());
}

void LocalServerCore::on_reset(Call call) {
  std::lock_guard<std::mutex> lk(mu_);
  if (closed_) return call.reply->complete(*closed_);
  std::string err;
  auto peer = decode_peer_only(call.message, true, err);
  if (!peer) return call.reply->complete(garbled(err));
  fail_everyone(Status(Errc::reset, *peer == UINT32_MAX ? std::string("the collective was reset")
                                                        : "the collective was reset by peer " + std::to_string(*peer)));
  clear();
  call.reply->complete(Status::ok());
}

void LocalServerCore::close(Status why) {
  std::lock_guard<std::mutex> lk(mu_);
  fail_everyone(why);
  closed_ = std::move(why);
  // Nothing reaches these once closed: a retired epoch (runtime/peer/elastic.cpp) keeps no connections or
  // compiled schedules for the Runtime's life.
  global_.reset();
  schedule_cache_.clear();
  global_cache_.clear();
}

void LocalServerCore::fail_everyone(const Status& why) {
  for (auto& [seq, op] : ops_)
    for (auto& a : op.arrivals)
      if (a) a->call.reply->complete(why);
  for (auto* q : {&sends_, &recvs_})
    for (auto& [key, halves] : *q)
      for (auto& h : halves) h.arrival.call.reply->complete(why);
  for (auto& [members, pg] : pending_groups_)
    for (auto& [peer, c] : pg.arrivals) c.reply->complete(why);
  pending_groups_.clear();
  group_timers_.clear();
  ops_.clear();
  noted_never_.clear();
  sends_.clear();
  recvs_.clear();
  op_timers_.clear();
  p2p_timers_.clear();
}

void LocalServerCore::clear() {
  ++epoch_;
  config_.reset();
  registered_.clear();
  finished_.clear();
  ops_.clear();
  noted_never_.clear();
  groups_.clear();
  next_group_ = 1;
}

} // namespace chorus
