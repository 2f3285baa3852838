# The chorus control protocol. Every message that crosses an actor boundary is one of these structs,
# encoded with Cap'n Proto and carried inside a CAF message. Tensor bytes never travel in these
# messages between the threads of one process: buffers are shared by reference beside the message.
# Versioning: fields are only ever appended (new ordinals); `protocolVersion` is bumped when the
# meaning of an existing field changes. Enums mirror strategies/types.hpp and schedule.hpp.
@0xa5f68aa0b07d7dbc;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("chorus::wire");

const protocolVersion :UInt32 = 14;  # 14: an announcement carries the shortest timeout its node's peers gave the op (OpAnnounce.timeoutMs), which bounds the transfers on every node; 13: a point-to-point message's data travels in a frame of its own (p2p_body), named by its id; 12: a node whose op timed out tells the op's other nodes (frame gave_up); 11: a point-to-point send whose data does not fit the receiver's window sends its header alone and its data when pulled (frames p2p_pull, p2p_pulled); 10: a point-to-point message carries an id its answer names, and a send that timed out withdraws its message (frame p2p_cancel); 9: a point-to-point frame carries its handle's group (FrameHeader.group); 8: links to remake in a shrink or grow (Rejoin.unkept, Topology.relink); 7: membership epochs (Rejoin, tickets, revoke, newcomers); 2: host identity, host transport, shared memory between processes of a host; 3: status requests (orchestrator and node actors answer them); 4: broken data connections (LinkLost); 5: GPU ops across nodes through NCCL (OpAnnounce's gpu fields); 6: every node's GPU count (auto runs GPU tensors through NCCL where every node of an op has a GPU)

enum DType { f16 @0; bf16 @1; f32 @2; f64 @3; i8 @4; u8 @5; i32 @6; i64 @7; }
enum ReduceOp { sum @0; prod @1; min @2; max @3; avg @4; band @5; bor @6; bxor @7; }
enum OpKind {
  allReduce @0; reduce @1; broadcast @2; allGather @3; reduceScatter @4;
  allToAll @5; gather @6; scatter @7; barrier @8; send @9; recv @10;
}
enum Algorithm { centralized @0; tree @1; ring @2; dbtree @3; direct @4; nccl @5; }

# How one op kind moves data at one level (local or global).
struct StrategyChoice {
  isAuto @0 :Bool;          # true: chosen per call by byte size and peer count
  algorithm @1 :Algorithm;  # the fixed algorithm when isAuto is false
  arity @2 :UInt32;         # tree arity (>= 2) when algorithm is tree
}

# The collective's configuration. Every peer (and, across nodes, every node) must send the same one.
struct Config {
  numDevices @0 :UInt32;                 # peers in this process; fixed at register time
  localStrategies @1 :List(StrategyChoice);   # indexed by OpKind (allReduce .. barrier)
  autoThresholdBytes @2 :UInt64;         # auto: below this many bytes use a tree, above it a ring
  autoTreeArity @3 :UInt32;              # auto: the arity of that tree
  timeoutMs @4 :UInt64;                  # every wait of an op gives up after this long
  numNodes @5 :UInt32;                   # 0: single process; otherwise processes in the collective
  orchestratorAddress @6 :Text;          # host:port of the orchestrator (multi-node only)
  nodeAddress @7 :Text;                  # host:port this node's data plane listens on (multi-node only)
  globalStrategies @8 :List(StrategyChoice);  # indexed by OpKind, inter-node level
  hostTransport @9 :UInt8;               # chorus::HostTransport: 0 automatic (shared memory within
                                         # a host), 1 network (sockets even within a host)
  # How this process was launched (per node: the orchestrator ignores them; docs/launching.md).
  rank @10 :Int32 = -1;                  # the node id its launcher gave this process (-1: any)
  joinTimeoutMs @11 :UInt64;             # how long the join may take (0: timeoutMs)
  hostOrchestrator @12 :Bool;            # this process hosts the orchestrator
  rendezvousFile @13 :Text;              # rank 0's file naming the orchestrator (one host, no address)
  elastic @14 :Bool;                     # the job admits newcomers after it starts (Peer::grow)
  sealData @15 :Bool;                    # data connections between hosts are TLS keyed by the secret
}

# Peer -> local server: join the collective.
struct RegisterRequest {
  protocolVersion @0 :UInt32;  # the sender's protocolVersion constant
  peerId @1 :UInt32;           # stable, unique, in [0, numDevices)
  config @2 :Config;           # must equal the first registered peer's config
}

# Peer -> local server: leave the collective (finish) or drop all state (reset).
struct Finish {
  peerId @0 :UInt32;
  epoch @1 :UInt64;         # the registration generation the register reply handed out
}
struct Reset { peerId @0 :UInt32; }

# ---- Multi-node control plane: node <-> orchestrator (actors/orchestrator/) ----
# A node asks to join the orchestrator's current collective. The reply (NodeRegisterReply) comes
# once every expected node has registered, or at once with an error.
struct NodeRegister {
  protocolVersion @0 :UInt32;  # the sender's protocolVersion constant
  secret @1 :Text;             # never set: the front door checks the secret without sending it
  config @2 :Config;           # must agree with the first node's (numDevices, nodeAddress and
                               # orchestratorAddress may differ per node)
  numPeers @3 :UInt32;         # peers hosted by this node (>= 1; may differ between nodes)
  dataAddress @4 :Text;        # host:port this node's data plane listens on
  hardwareThreads @5 :UInt32;  # of the node's machine (every node then judges crowding alike)
  hostKey @6 :Text;            # which host the node is on (boot id, network namespace, host name):
                               # nodes with the same key share memory
  gpus @7 :UInt32;             # CUDA devices of the node's machine (0: none, or chorus without CUDA);
                               # every node then decides alike whether auto runs an op through NCCL
  rank @8 :Int32 = -1;         # the node id its launcher gave it (-1: any; the orchestrator numbers
                               # such nodes in arrival order, around the ranks given)
  rejoin @9 :Rejoin;           # set: a member's registration for its collective's next epoch
  newcomer @10 :Bool;          # a newcomer to a running elastic job (chorus-run --join): never
                               # admitted as one of the job's first nodes
}

# A member of a running collective registering again, for the membership that follows a shrink or
# a grow (Peer::shrink, Peer::grow; docs/elastic.md). It names the member it was and proves it with
# that member's own ticket, so no member can speak for another.
struct Rejoin {
  kind @0 :UInt8;              # 0 none, 1 shrink, 2 grow
  collective @1 :UInt64;       # the collective it is a member of
  nodeId @2 :UInt32;           # its node id there
  ticket @3 :UInt64;           # that node's ticket (Topology.ticket)
  exclude @4 :List(UInt32);    # shrink: node ids left out although alive (ascending)
  unkept @5 :List(UInt32);     # node ids whose data link ended on this side (ascending): the
                               # next epoch remakes those pairs on both sides (Topology.relink)
}

# One node of the topology, indexed by node id.
struct NodeInfo {
  numPeers @0 :UInt32;
  peerOffset @1 :UInt32;       # global id of this node's first peer (sum of numPeers before it)
  dataAddress @2 :Text;
  hardwareThreads @3 :UInt32;  # as the node registered it
  host @4 :UInt32;             # the node's host: nodes with equal host keys share a number (0, 1, ...
                               # in the order of their first node)
  gpus @5 :UInt32;             # as the node registered it
}

# What every node learns once the collective is complete.
struct Topology {
  collective @0 :UInt64;       # generation of the collective (grows by one per collective)
  nodeId @1 :UInt32;           # the receiver's node id (arrival order)
  numNodes @2 :UInt32;
  totalPeers @3 :UInt32;
  nodes @4 :List(NodeInfo);
  token @5 :UInt64;            # random per collective: data-plane connections present it (only
                               # nodes that passed the secret check learn it)
  epoch @6 :UInt32;            # the membership epoch: 0 at admission, one more per shrink or grow
  ticket @7 :UInt64;           # random, the receiver's alone: proves it is this node in a Rejoin
  previous @8 :List(Int32);    # by node id: its id in the epoch before (-1: a newcomer); empty at 0
  relink @9 :List(UInt32);     # the receiver's: new node ids whose link from the epoch before it
                               # drops and connects anew (one side could not keep it; ascending)
}

# Orchestrator -> node: the answer to NodeRegister.
struct NodeRegisterReply {
  code @0 :UInt16;             # chorus::Errc; 0 is ok and `topology` is set
  message @1 :Text;            # the reason of a rejection, naming the field or value
  topology @2 :Topology;
}

# Node -> orchestrator: this node leaves the collective (sent as a one-way message).
struct NodeLeave {
  collective @0 :UInt64;
  nodeId @1 :UInt32;
}

# Orchestrator -> surviving nodes: a node of the complete collective was lost.
struct NodeLost {
  collective @0 :UInt64;
  nodeId @1 :UInt32;
  reason @2 :Text;
}

# Node -> orchestrator: this node's data connection to another node broke (reset, aborted, garbled,
# or cut off after a stall), both nodes perhaps alive. Orchestrator -> every other member node: the
# first such report of the collective, as it came (codec: messages/link_codec.hpp).
struct LinkLost {
  collective @0 :UInt64;
  reporter @1 :UInt32;         # the node that saw it (the sender of a report)
  other @2 :UInt32;            # the node at the other end
  reason @3 :Text;             # what the reporter saw, e.g. "the connection failed: Connection reset by peer"
}

# ---- Where a job stands (chorus-ctl status; codec: messages/status_codec.hpp) ----

# chorus-ctl -> orchestrator: asks where every node stands (whoever passed the front door).
struct StatusRequest {
  secret @0 :Text;  # never set: the front door checks the secret without sending it
}

# One peer as its node sees it: the op it is in and what that op waits for, or the last it did.
struct PeerStatus {
  rank @0 :UInt32;             # global rank
  busy @1 :Bool;               # in an op now
  group @2 :UInt32;
  seq @3 :UInt64;              # the op's sequence number (2^64-1: send/recv)
  op @4 :Text;                 # e.g. "all_reduce f32[4] sum"
  state @5 :Text;              # waiting (for this node's peers) | running (the data phase)
  waitedNs @6 :Int64;          # since the peer entered the op
  waitingFor @7 :Text;         # e.g. "rank 3 (this node) has not called", "node 1 has not called"
  lastDone @8 :Text;           # not busy: the last op it finished, e.g. "group 0 #6 all_reduce f32[4] sum"
}

# Orchestrator -> node (request) and back: the node's peers.
struct NodeStatus {
  node @0 :UInt32;
  host @1 :Text;
  pid @2 :Int64;
  peers @3 :List(PeerStatus);
  note @4 :Text;               # e.g. why the peers are not known (the flight recorder is off)
}

# Orchestrator -> chorus-ctl: every node's answer, or an error (code != 0).
struct JobStatus {
  code @0 :UInt16;
  message @1 :Text;
  collective @2 :UInt64;
  expectedNodes @3 :UInt32;
  registeredNodes @4 :UInt32;
  complete @5 :Bool;
  nodes @6 :List(NodeStatus);
  silent @7 :List(UInt32);     # member nodes that did not answer in time
  members @8 :List(JobMember); # once complete: every node as the orchestrator knows it
  epoch @9 :UInt32;            # the membership epoch (0 as admitted; one more per shrink or grow)
  newcomers @10 :UInt32;       # an elastic job's newcomers waiting for a grow
}

struct JobMember {
  node @0 :UInt32;
  state @1 :MemberState;
  reason @2 :Text;             # lost: why (as the other nodes were told)
}

enum MemberState {
  joined @0;                   # in the collective
  left @1;                     # said goodbye
  lost @2;                     # died, went silent, or dropped its connection
}

# ---- Multi-node data plane: global client <-> global client (mesh/ for the hello, actors/global_client/ for the rest) ----
# Frames on a data connection are a fixed 32-byte header (transport/frame.hpp) and a payload; the
# payloads below are Cap'n Proto messages, tensor bytes travel raw. Codecs: messages/data_codec.hpp.

# The first frame on a new data connection, from the connecting (higher-id) node.
struct DataHello {
  protocolVersion @0 :UInt32;
  collective @1 :UInt64;       # Topology.collective
  nodeId @2 :UInt32;           # the sender's node id
  token @3 :UInt64;            # Topology.token
}

# Sent by every node to every other when all of its peers have called one collective op: what the
# node's peers agreed on (or why they did not). Every node compares all announcements the same way,
# so every peer of every node gets the same error on a mismatch.
struct OpAnnounce {
  nodeId @0 :UInt32;
  kind @1 :UInt8;              # chorus::OpKind
  dtype @2 :UInt8;             # chorus::DType
  redop @3 :UInt8;             # chorus::ReduceOp (reducing ops)
  root @4 :UInt32;             # global rank (rooted ops)
  count @5 :UInt64;            # per-peer element count (strategies/schedule.hpp)
  shape @6 :List(Int64);       # the agreed tensor shape
  statusCode @7 :UInt16;       # non-zero: the node's own peers disagree; statusMessage says how
  statusMessage @8 :Text;
  # An op on GPU tensors through NCCL across nodes (cuda/nccl_job.hpp); all empty otherwise.
  gpu @9 :Bool;                # this node's peers pass GPU tensors and run the op through NCCL
  devices @10 :List(Int32);    # the GPU of each of this node's ranks, in rank order
  ncclLive @11 :UInt64;        # the generation of this node's usable communicator (0: none)
  ncclLast @12 :UInt64;        # the group's last generation this node built or joined
  ncclId @13 :Data;            # from the node of rank 0: the unique id of generation ncclLast + 1
  timeoutMs @14 :UInt32;       # the shortest timeout this node's peers gave the op of their own (OpOptions::timeout); 0: none
}

# Point to point across nodes: the header of a send, followed by the data frame. The frame
# header's group names the handle (as for a collective's frames); P2PAck's frame carries it back.
struct P2PHeader {
  source @0 :UInt32;           # global ids
  destination @1 :UInt32;
  tag @2 :UInt64;
  dtype @3 :UInt8;
  numel @4 :UInt64;
  failedCode @5 :UInt16;       # non-zero: the sender could not send (no data follows); why:
  failure @6 :Text;
  id @7 :UInt64;               # the sender node's number for this message, which its answer names
  pulled @8 :Bool;             # no data follows: it waits at the sender until the receive pulls it
}

# Half an op's timeout gone with ranks of this node not called yet (frame `stragglers`; the header
# names the op): which, so that every node names them rather than this node when the op times out.
struct Stragglers {
  ranks @0 :List(UInt32);      # the op's group ranks
}

# A node about to leave whose op failed (frame `leaving`, before its goodbye; the header names the
# op): why, so that the nodes still waiting in that op report the cause, not the departure.
struct Leaving {
  code @0 :UInt16;
  message @1 :Text;
}

# The receiver's answer to a cross-node send: ok, or why the pair did not match, or that the
# message was withdrawn before a receive took it (frame p2p_ack). The same struct, in frame
# p2p_cancel, withdraws a message whose send timed out (its status says why).
struct P2PAck {
  statusCode @0 :UInt16;
  statusMessage @1 :Text;
  source @2 :UInt32;           # the pair, as in P2PHeader
  destination @3 :UInt32;
  tag @4 :UInt64;
  id @5 :UInt64;               # the message answered (P2PHeader.id); also what a p2p_cancel withdraws
}
