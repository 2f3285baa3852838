// chorus-fuzz-corpus DIR: writes the fuzz targets' seeds into DIR/<target>/ (tests/fuzz/corpus in
// the tree): small valid inputs made by chorus's own encoders, from which the fuzzer mutates.
// Run again when a message or frame changes shape: cmake --build build-fuzz --target
// chorus-fuzz-corpus && build-fuzz/bin/chorus-fuzz-corpus tests/fuzz/corpus
#include <sys/stat.h>

#include <cstdio>
#include <vector>

#include "fuzz_kit.hpp"
#include "messages/data_codec.hpp"
#include "messages/status_codec.hpp"
#include "transport/door_handshake.hpp"
#include "transport/frame.hpp"
#include "transport/socket.hpp"

using namespace chorus;

namespace {

std::string root;

void seed(const std::string& target, const std::string& name, const std::string& bytes) {
  const std::string dir = root + "/" + target;
  mkdir(dir.c_str(), 0755);
  FILE* f = std::fopen((dir + "/" + name).c_str(), "wb");
  FUZZ_CHECK(f, dir + "/" + name);
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
}

std::string bytes(const Envelope& e) { return envelope_bytes(e); }

std::string frame(FrameType type, const std::string& payload, uint32_t slot = 0, uint64_t seq = 0) {
  FrameHeader h;
  h.type = type;
  h.slot = slot;
  h.seq = seq;
  return whole_frame(h, payload);
}

// What one node sends another in a job: its hello, an announcement and its data, a send with its
// header, the answer to one, and goodbye.
std::string stream(const DataHello& hello) {
  OpAnnouncement a;
  a.node = hello.node;
  a.kind = OpKind::all_reduce;
  a.count = 4;
  a.shape = {2, 2};
  P2PHeaderData ph{hello.node, 0, 5, DType::f32, 2, Status::ok(), 1};
  const std::string head = encode_p2p_header(ph);
  const std::string floats(8, '\x3f');
  return frame(FrameType::hello, encode_data_hello(hello)) + frame(FrameType::announce, encode_announcement(a), 0, 1) +
         frame(FrameType::data, std::string(16, '\x41'), 3, 1) +
         frame(FrameType::p2p_data, head, static_cast<uint32_t>(head.size()), 1) + frame(FrameType::p2p_body, floats, 0, 1) +
         frame(FrameType::p2p_ack, encode_p2p_ack({0, hello.node, 6, Status(Errc::dtype_mismatch, "f32 vs f64")})) +
         frame(FrameType::bye, "");
}

// The first flight of a TLS client (its ClientHello), caught on a socket pair.
std::string client_hello() {
  fuzz::SocketPair pair;
  std::thread t([&] {
    (void)TlsChannel::handshake(*fuzz::TestCerts::get().context, pair.ours, false,
                                Clock::now() + std::chrono::milliseconds(300));
  });
  std::string got(16384, '\0');
  const Status s = read_exact(pair.theirs, got.data(), 5, Clock::now() + std::chrono::seconds(5));
  FUZZ_CHECK(s.is_ok(), s.to_string());
  const std::size_t len = (static_cast<uint8_t>(got[3]) << 8) | static_cast<uint8_t>(got[4]);
  FUZZ_CHECK(read_exact(pair.theirs, got.data() + 5, len, Clock::now() + std::chrono::seconds(5)).is_ok(), "hello");
  t.join();
  return got.substr(0, 5 + len);
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: chorus-fuzz-corpus DIR\n");
    return 2;
  }
  root = argv[1];
  mkdir(root.c_str(), 0755);

  // messages/: each decoder's message, valid, with its fields set.
  const DataHello hello{protocol_version(), 7, 1, 0x5eed};
  OpAnnouncement a;
  a.node = 2;
  a.kind = OpKind::reduce_scatter;
  a.dtype = DType::bf16;
  a.redop = ReduceOp::max;
  a.root = 1;
  a.count = 12;
  a.shape = {3, 4, 1};
  a.status = Status(Errc::shape_mismatch, "rank 3 has [3,4]");
  a.timeout_ms = 300;  // a peer's OpOptions::timeout
  seed("data_codec", "hello", encode_data_hello(hello));
  seed("data_codec", "announcement", encode_announcement(a));
  OpAnnouncement g = a;  // an NCCL op's, from the node of rank 0
  g.status = Status::ok();
  g.gpu = true;
  g.devices = {0, 1};
  g.nccl_live = 3;
  g.nccl_last = 3;
  g.nccl_id.assign(128, '\x5a');
  seed("data_codec", "announcement_nccl", encode_announcement(g));
  seed("data_codec", "p2p_header", encode_p2p_header({1, 4, 9, DType::i64, 3, Status::ok()}));
  seed("data_codec", "p2p_header_failed", encode_p2p_header({1, 4, 9, DType::f16, 0, Status(Errc::timeout, "late")}));
  seed("data_codec", "p2p_ack", encode_p2p_ack({1, 4, 9, Status(Errc::dtype_mismatch, "f32 vs f64")}));

  const NodeRegisterData reg = fuzz::node_registration("127.0.0.1:7101");
  TopologyData topo;
  topo.collective = 3;
  topo.node_id = 1;
  topo.num_nodes = 2;
  topo.total_peers = 3;
  topo.nodes = {{2, 0, "10.0.0.1:7100", 8, 0, 2}, {1, 2, "10.0.0.2:7100", 4, 1, 0}};
  topo.token = 0xabc;
  seed("node_codec", "register", bytes(encode_node_register(reg)));
  seed("node_codec", "reply", bytes(encode_node_register_reply(Status::ok(), topo)));
  seed("node_codec", "reply_refused", bytes(encode_node_register_reply(Status(Errc::auth_failed, "wrong secret"))));
  seed("node_codec", "leave", bytes(encode_node_leave({3, 1})));
  seed("node_codec", "lost", bytes(encode_node_lost({3, 0, "node 0 lost: the connection was closed"})));

  RegisterData peer_reg{protocol_version(), 1, reg.config};
  peer_reg.config.local[0] = *parse_strategy("tree:3");
  seed("peer_codec", "register", bytes(encode_register(peer_reg)));
  seed("peer_codec", "finish", bytes(encode_peer_only(1, false, 42)));
  seed("peer_codec", "reset", bytes(encode_peer_only(2, true)));

  NodeStatusData ns;
  ns.node = 1;
  ns.host = "host-b";
  ns.pid = 4242;
  ns.peers = {{2, true, 0, 5, "all_reduce f32[4] sum", "running", 1500000000, "node 0 has not called", ""},
              {3, false, 0, UINT64_MAX, "", "", 0, "", "group 0 #4 barrier"}};
  JobStatusData js;
  js.collective = 3;
  js.expected_nodes = 2;
  js.registered_nodes = 2;
  js.complete = true;
  js.nodes = {ns};
  js.silent = {0};
  seed("status_codec", "request", bytes(encode_status_request({})));
  seed("status_codec", "node_status", bytes(encode_node_status(ns)));
  seed("status_codec", "job_status", bytes(encode_job_status(js)));
  JobStatusData refused;
  refused.status = Status(Errc::auth_failed, "wrong secret");
  seed("status_codec", "job_refused", bytes(encode_job_status(refused)));

  // The envelope alone: messages of several schemas.
  seed("envelope", "register", bytes(encode_node_register(reg)));
  seed("envelope", "job_status", bytes(encode_job_status(js)));
  seed("envelope", "announcement", encode_announcement(a));

  // Registration: the second node of registration_fuzz's collective.
  seed("registration", "second_node", bytes(encode_node_register(reg)));

  // The data plane: a node's stream of frames, plain and inside TLS (first byte: 0 as it is, 1
  // with a byte of the ciphertext flipped), and the hello alone.
  const std::string s = stream(hello);
  seed("tcp_frames", "stream", s);
  seed("tcp_frames", "hello", frame(FrameType::hello, encode_data_hello(hello)));
  seed("tls_frames", "stream", std::string(1, '\0') + s);
  seed("tls_frames", "stream_flipped", std::string(1, '\1') + s);
  seed("data_hello", "plain", std::string(1, '\0') + frame(FrameType::hello, encode_data_hello(hello)));
  seed("data_hello", "tls", std::string(1, '\1') + frame(FrameType::hello, encode_data_hello(hello)));
  seed("tls_handshake", "client_hello", client_hello());

  // The front door: a right answer followed by a BASP-sized header, a wrong answer, half of one.
  seed("front_door", "right_answer", std::string(1, '\1') + std::string(32, '\0'));
  seed("front_door", "wrong_answer", std::string(1, '\0') + std::string(door::kAnswerSize, 'x'));
  seed("front_door", "half_answer", std::string(1, '\0') + std::string(door::kAnswerSize / 2, 'x'));
  // Its client: an open door, a challenge from a door that knows the secret, one that refuses.
  door::Greeting open{}, challenge{};
  door::make_greeting(door::Mode::open, open);
  door::make_greeting(door::Mode::challenge, challenge);
  const std::string open_bytes(open.begin(), open.end()), challenge_bytes(challenge.begin(), challenge.end());
  seed("door_passage", "open", std::string(1, '\0') + open_bytes);
  seed("door_passage", "knows_secret", std::string(1, '\1') + challenge_bytes);
  seed("door_passage", "refuses", std::string(1, '\0') + challenge_bytes + "N");
  // Past a sealed door: a BASP header encrypted; raw, an application data record's header with
  // 16 bytes that are no record, and an alert.
  seed("sealed_relay", "encrypted", std::string(1, '\0') + std::string(32, '\0'));
  seed("sealed_relay", "raw_record", std::string(1, '\1') + std::string("\x17\x03\x03\x00\x10", 5) + std::string(16, 'x'));
  seed("sealed_relay", "raw_alert", std::string(1, '\1') + std::string("\x15\x03\x03\x00\x02\x02\x28", 7));
  return 0;
}
