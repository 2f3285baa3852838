#include "messages/status_codec.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <tuple>

#include "chorus.capnp.h"

namespace chorus {

namespace {

void fill(wire::NodeStatus::Builder b, const NodeStatusData& n) {
  b.setNode(n.node);
  b.setHost(n.host);
  b.setPid(n.pid);
  b.setNote(n.note);
  auto ps = b.initPeers(static_cast<unsigned>(n.peers.size()));
  for (unsigned i = 0; i < n.peers.size(); ++i) {
    const PeerStatusData& p = n.peers[i];
    auto w = ps[i];
    w.setRank(p.rank);
    w.setBusy(p.busy);
    w.setGroup(p.group);
    w.setSeq(p.seq);
    w.setOp(p.op);
    w.setState(p.state);
    w.setWaitedNs(p.waited_ns);
    w.setWaitingFor(p.waiting_for);
    w.setLastDone(p.last_done);
  }
}

NodeStatusData read(wire::NodeStatus::Reader r) {
  NodeStatusData n;
  n.node = r.getNode();
  n.host = r.getHost();
  n.pid = r.getPid();
  n.note = r.getNote();
  for (auto p : r.getPeers())
    n.peers.push_back({p.getRank(), p.getBusy(), p.getGroup(), p.getSeq(), p.getOp(), p.getState(), p.getWaitedNs(),
                       p.getWaitingFor(), p.getLastDone()});
  return n;
}

std::string seconds(int64_t ns) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f s", static_cast<double>(ns) / 1e9);
  return b;
}

} // namespace

std::string rank_list(std::vector<uint32_t> r) {
  std::sort(r.begin(), r.end());
  r.erase(std::unique(r.begin(), r.end()), r.end());
  std::string out;
  for (std::size_t i = 0; i < r.size();) {
    std::size_t j = i;
    while (j + 1 < r.size() && r[j + 1] == r[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(r[i]);
    if (j > i) {
      out += '-';
      out += std::to_string(r[j]);
    }
    i = j + 1;
  }
  return out;
}

std::string rank_phrase(const std::vector<uint32_t>& r) { return (r.size() == 1 ? "rank " : "ranks ") + rank_list(r); }

Envelope encode_status_request(const StatusRequestData& r) {
  capnp::MallocMessageBuilder mb;
  (void)r;
  mb.initRoot<wire::StatusRequest>();
  return seal(mb);
}

Envelope encode_node_status(const NodeStatusData& n) {
  capnp::MallocMessageBuilder mb;
  fill(mb.initRoot<wire::NodeStatus>(), n);
  return seal(mb);
}

Envelope encode_job_status(const JobStatusData& j) {
  capnp::MallocMessageBuilder mb;
  auto b = mb.initRoot<wire::JobStatus>();
  b.setCode(static_cast<uint16_t>(j.status.code()));
  b.setMessage(j.status.message());
  b.setCollective(j.collective);
  b.setExpectedNodes(j.expected_nodes);
  b.setRegisteredNodes(j.registered_nodes);
  b.setComplete(j.complete);
  b.setEpoch(j.epoch);
  b.setNewcomers(j.newcomers);
  auto ns = b.initNodes(static_cast<unsigned>(j.nodes.size()));
  for (unsigned i = 0; i < j.nodes.size(); ++i) fill(ns[i], j.nodes[i]);
  auto s = b.initSilent(static_cast<unsigned>(j.silent.size()));
  for (unsigned i = 0; i < j.silent.size(); ++i) s.set(i, j.silent[i]);
  auto ms = b.initMembers(static_cast<unsigned>(j.members.size()));
  for (unsigned i = 0; i < j.members.size(); ++i) {
    ms[i].setNode(j.members[i].node);
    ms[i].setState(static_cast<wire::MemberState>(j.members[i].state));
    ms[i].setReason(j.members[i].reason);
  }
  return seal(mb);
}

std::optional<StatusRequestData> decode_status_request(const Envelope& e, std::string& error) {
  return open_envelope(e, error, [](EnvelopeReader& r) {
    (void)r.root<wire::StatusRequest>();
    return StatusRequestData{};
  });
}

std::optional<NodeStatusData> decode_node_status(const Envelope& e, std::string& error) {
  return open_envelope(e, error, [](EnvelopeReader& r) { return read(r.root<wire::NodeStatus>()); });
}

std::optional<JobStatusData> decode_job_status(const Envelope& e, std::string& error) {
  auto d = open_envelope(e, error, [](EnvelopeReader& r) {
    auto m = r.root<wire::JobStatus>();
    JobStatusData j;
    j.status = m.getCode() == 0 ? Status::ok() : Status(static_cast<Errc>(m.getCode()), m.getMessage());
    j.collective = m.getCollective();
    j.expected_nodes = m.getExpectedNodes();
    j.registered_nodes = m.getRegisteredNodes();
    j.complete = m.getComplete();
    j.epoch = m.getEpoch();
    j.newcomers = m.getNewcomers();
    for (auto n : m.getNodes()) j.nodes.push_back(read(n));
    for (auto s : m.getSilent()) j.silent.push_back(s);
    for (auto x : m.getMembers()) {
      // A state this build does not know (a newer orchestrator's) reads as lost: not in the job.
      const auto st = static_cast<uint16_t>(x.getState());
      j.members.push_back({x.getNode(), st <= 2 ? static_cast<JobMemberData::State>(st) : JobMemberData::State::lost,
                           x.getReason()});
    }
    return j;
  });
  if (d && d->status.code() > last_errc) {
    error = "a job status with unknown error code " + std::to_string(static_cast<int>(d->status.code()));
    return std::nullopt;
  }
  return d;
}

std::string job_status_report(const JobStatusData& j) {
  if (!j.status) return "refused: " + j.status.to_string() + "\n";
  // After a shrink or grow the job's size is its epoch's, not the one it was admitted with.
  std::string out = "collective " + std::to_string(j.collective) + ": " +
                    (j.epoch > 0 ? "membership epoch " + std::to_string(j.epoch) + ", " + std::to_string(j.registered_nodes) +
                                       " nodes joined"
                                 : std::to_string(j.registered_nodes) + " of " + std::to_string(j.expected_nodes) + " nodes " +
                                       (j.complete ? "joined" : "registered so far"));
  if (j.newcomers > 0) out += ", " + std::to_string(j.newcomers) + " newcomer(s) waiting for a grow";
  // Since the join: who is still in, and each node that is not, with why.
  uint32_t in = 0;
  std::string gone;
  for (const auto& m : j.members) {
    if (m.state == JobMemberData::State::joined) {
      ++in;
      continue;
    }
    gone += "node " + std::to_string(m.node) +
            (m.state == JobMemberData::State::left ? ": left\n" : ": lost" + (m.reason.empty() ? "" : ": " + m.reason) + "\n");
  }
  if (!gone.empty()) out += ", " + std::to_string(in) + " still in";
  out += "\n" + gone;
  // Busy ranks by (group, seq, op, state, what they wait for); the longest wait of each line.
  using Key = std::tuple<uint32_t, uint64_t, std::string, std::string, std::string>;
  std::map<Key, std::pair<std::vector<uint32_t>, int64_t>> busy;
  std::map<std::string, std::vector<uint32_t>> idle;  // by last op
  for (const NodeStatusData& n : j.nodes) {
    if (!n.note.empty()) out += "node " + std::to_string(n.node) + ": " + n.note + "\n";
    for (const PeerStatusData& p : n.peers) {
      if (!p.busy) {
        idle[p.last_done].push_back(p.rank);
        continue;
      }
      auto& e = busy[Key{p.group, p.seq, p.op, p.state, p.waiting_for}];
      e.first.push_back(p.rank);
      e.second = std::max(e.second, p.waited_ns);
    }
  }
  for (const auto& [k, v] : busy) {
    const auto& [group, seq, op, state, waiting_for] = k;
    out += rank_phrase(v.first) + ": group " + std::to_string(group) +
           (seq == UINT64_MAX ? " " : " #" + std::to_string(seq) + " ") + op + ", " + state + " for " + seconds(v.second);
    if (!waiting_for.empty()) out += "; waits for " + waiting_for;
    out += "\n";
  }
  for (const auto& [last, ranks] : idle)
    out += rank_phrase(ranks) + ": in no op" + (last.empty() ? "" : "; last done: " + last) + "\n";
  for (uint32_t s : j.silent) out += "node " + std::to_string(s) + ": did not answer\n";
  return out;
}

} // namespace chorus
