// egressd-probe: the hostile client used by the egressd lab tests.
// Parses every operation first (exit 2 on any usage error), then runs them in
// order, printing one JSON line per attempt. Exit 0 whatever the results.
#include <arpa/inet.h>
#include <signal.h>

#include <cstdio>
#include <cstring>
#include <set>
#include <sstream>

#include "probe_common.h"

namespace egressd::probe {
int ParseSignal(const std::string& s);

namespace {

constexpr char kUsage[] = R"(usage: egressd-probe OP ARGS... [--then OP ARGS...]...
       egressd-probe batch "OP ARGS..." "OP ARGS..." ...
       egressd-probe --help

Runs each operation in order and prints one JSON line per attempt, e.g.
  {"op":"tcp","dst":"192.0.2.10","port":80,"result":"ok","echo":true,"ms":1}
  {"op":"tcp","dst":"10.1.2.3","port":80,"result":"error","errno":"EPERM","stage":"connect","ms":0}
"result" is the outcome of the syscalls; "stage" names the one that failed
(socket, setsockopt, connect, send, sendto, sendmsg, sendmmsg, recv, ...). A
silent drop shows as errno ETIMEDOUT (our own deadline). UDP and ICMP lines add
"echo":true/false: whether the lab answered within --wait-ms.
Exit status: 0 if the operations ran (whatever their results), 2 on usage errors.

Addresses: IPv4, IPv6, or [IPv6]. Ports: 0-65535.
Network operations:
  tcp ADDR PORT                 non-blocking connect (--timeout-ms), send payload, read echo
  udp-connected ADDR PORT       connect() + send()
  udp-sendto ADDR PORT          unconnected sendto() (AF_INET6 dual stack for v6/::ffff:)
  udp-sendmsg ADDR PORT         unconnected sendmsg() with msg_name
  udp-sendmmsg A:P,[V6]:P,...   one socket, one sendmmsg(); one line per message with
                                "first_call_ret" and "call" (the sendmmsg call that
                                decided it; the rest is retried after a failure)
  raw-udp ADDR PORT             SOCK_RAW IPPROTO_UDP, hand-made UDP header
  raw-icmp ADDR                 SOCK_RAW ICMP/ICMPv6 echo request
  ping-sock ADDR                SOCK_DGRAM ICMP "ping socket" (net.ipv4.ping_group_range)
  rthdr6 DST PORT VIA [--rh-type 4|0|2] [--tcp]
                                IPv6 UDP connected to DST with an IPV6_RTHDR sticky
                                routing header (type 4 = SRH) whose first hop is VIA
  lsrr4 DST PORT VIA [--strict] [--tcp]
                                IPv4 UDP with IP_OPTIONS loose (strict) source route via VIA
  tfo ADDR PORT                 sendto(MSG_FASTOPEN) on a new TCP socket; "syn_data" bytes
  uring-connect ADDR PORT       io_uring IORING_OP_CONNECT (+ link timeout); "cqe_res"
  so-mark MARK ADDR PORT        setsockopt(SO_MARK) ("mark_result"/"mark_errno"), then tcp
  mapped6 ADDR PORT [--udp|--udp-connected]
                                AF_INET6, IPV6_V6ONLY=0, to ::ffff:ADDR (tcp by default)
  via-dev MODE ADDR PORT IF [--tcp]
                                UDP sendto (TCP connect + echo with --tcp) forced out of
                                interface IF; MODE: bindtodevice (SO_BINDTODEVICE),
                                unicast-if (IP_UNICAST_IF/IPV6_UNICAST_IF) or pktinfo
                                (IP_PKTINFO/IPV6_PKTINFO cmsg, UDP only)
  mptcp ADDR PORT [--hold-ms N] [--until-subflow]
                                MPTCP connect + echo, echoing on for N ms (or until the
                                path manager created a subflow): "subflows" it created
  mptcp-serve PORT              MPTCP echo server on 0.0.0.0:PORT ({"state":"listening"})
  udp-burst ADDR PORT N         N sendto() of one byte on one socket: {"sent","refused","other"}
  udp-pace ADDR PORT [--interval-ms N] [--count K]
                                QUIC-style: one unconnected socket, a sendto() every N ms
                                (100), K (10) of them, a line each with "round", "start_ms"
  tcp-burst ADDR PORT N         N sockets connect()ed and closed: {"connected","refused","other"}
  dns-names RESOLVER PORT SUFFIX N [--window W]
                                N type-A queries for unique names q<i>.SUFFIX on one UDP
                                socket (sendmmsg/recvmmsg), at most W (64) unanswered;
                                stops after --timeout-ms without an answer: {"sent",
                                "answered","nxdomain","noerror","unanswered",...}
  scm-give PATH                 offer a fresh TCP socket over SCM_RIGHTS on unix PATH
  scm-connect PATH ADDR PORT    receive a socket from PATH, connect it to ADDR PORT, echo
  hold ADDR PORT [--interval-ms N] [--count K] [--timeout-ms T] [--udp]
                                one TCP connection (--udp: one connected UDP socket);
                                line "round":0 for the connect, then every N ms send
                                "round i" and expect its echo (K rounds); each round
                                line has "start_ms" (CLOCK_MONOTONIC)
  mcast-join GROUP IFNAME [--api membership|source|group|source-group] [--source S]
                                join GROUP on IFNAME (IP_ADD_MEMBERSHIP / IPV6_JOIN_GROUP,
                                IP_ADD_SOURCE_MEMBERSHIP, MCAST_JOIN_GROUP,
                                MCAST_JOIN_SOURCE_GROUP), hold it --hold-ms (200)
  so-broadcast ADDR PORT        setsockopt(SO_BROADCAST, 1), then sendto() ADDR
Socket families (none pass the cgroup hooks; the BPF LSM judges them):
  packet-udp DST PORT MAC [--via V] [--ifname IF]
                                AF_PACKET frame (Ethernet+IPv4+UDP) to MAC on IF (eth0);
                                V: sendto (default), send, write, sendmsg, sendmmsg,
                                uring-send, uring-sendmsg, uring-send-zc, txring
                                (PACKET_TX_RING + send), sendfile, splice
  packet-frame HEX [--ifname IF]
                                AF_PACKET: the Ethernet frame HEX as it is, on IF (eth0)
  packet-sniff DST PORT         AF_PACKET receive socket, then a UDP datagram to DST:PORT;
                                "captured": whether the packet socket saw it
  socket-family N [--type T] [--pair]
                                socket(N, T (default SOCK_RAW), 0); socketpair() with --pair
  uring-socket N [--type T]     the same socket made by io_uring IORING_OP_SOCKET (no socket(2))
  xdp-socket | vsock-connect PORT   AF_XDP socket; AF_VSOCK connect to the local CID
  unix-listen NAME [--dgram]    abstract @NAME; "state":"listening", then a line per peer
  unix-connect NAME [--dgram]   connect + send (stream) or sendto (dgram) to @NAME
Other operations:
  write-file PATH TEXT [--create]   open(O_WRONLY) + write
  unlink PATH | mkdir PATH | kill PID SIG (number or name)
  join-cgroup DIR               write our pid to DIR/cgroup.procs, then go on
  refuse-clone3                 a seccomp filter failing clone3 with ENOSYS (as container
                                runtimes' profiles do), then go on
  open-write PATH               open(O_WRONLY) and close, writing nothing
  unix-path-connect PATH        connect to a pathname unix stream socket, send payload,
                                read until EOF ("reply")
  exec -- ARGV...               execvp the rest of the command line (must be last)
  sleep MS | info               sleep prints {"state":"sleeping"} first, then its result;
                                info: pid, uid, capabilities, cgroup, netns
Options (after the operation's arguments):
  --timeout-ms N (connect/echo deadline, default 2000)  --wait-ms N (UDP/ICMP echo
  wait, default 300)  --payload TEXT (default "ping\n")  --interval-ms N  --count N
  --connect-timeout-ms N  --rh-type N  --udp  --udp-connected  --tcp  --strict  --create
  --source ADDR --source-mac MAC (packet-udp: a forged IPv4 source / source MAC)
)";

enum class Arg { kAddr, kAddr4, kAddr6, kPort, kList, kText, kInt };

struct OpSpec {
  const char* name;
  std::vector<Arg> args;
  void (*fn)(const Op&);
};

const std::vector<OpSpec>& Specs() {
  using A = Arg;
  static const std::vector<OpSpec> specs = {
      {"tcp", {A::kAddr, A::kPort}, OpTcp},
      {"udp-connected", {A::kAddr, A::kPort}, OpUdpConnected},
      {"udp-sendto", {A::kAddr, A::kPort}, OpUdpSendto},
      {"udp-sendmsg", {A::kAddr, A::kPort}, OpUdpSendmsg},
      {"udp-sendmmsg", {A::kList}, OpUdpSendmmsg},
      {"raw-udp", {A::kAddr, A::kPort}, OpRawUdp},
      {"raw-icmp", {A::kAddr}, OpRawIcmp},
      {"ping-sock", {A::kAddr}, OpPingSock},
      {"mcast-join", {A::kAddr, A::kText}, OpMcastJoin},
      {"so-broadcast", {A::kAddr4, A::kPort}, OpSoBroadcast},
      {"rthdr6", {A::kAddr6, A::kPort, A::kAddr6}, OpRthdr6},
      {"lsrr4", {A::kAddr4, A::kPort, A::kAddr4}, OpLsrr4},
      {"tfo", {A::kAddr, A::kPort}, OpTfo},
      {"uring-connect", {A::kAddr, A::kPort}, OpUringConnect},
      {"so-mark", {A::kInt, A::kAddr, A::kPort}, OpSoMark},
      {"mapped6", {A::kAddr4, A::kPort}, OpMapped6},
      {"via-dev", {A::kText, A::kAddr, A::kPort, A::kText}, OpViaDev},
      {"mptcp", {A::kAddr, A::kPort}, OpMptcp},
      {"mptcp-serve", {A::kPort}, OpMptcpServe},
      {"scm-give", {A::kText}, OpScmGive},
      {"scm-connect", {A::kText, A::kAddr, A::kPort}, OpScmConnect},
      {"hold", {A::kAddr, A::kPort}, OpHold},
      {"packet-udp", {A::kAddr4, A::kPort, A::kText}, OpPacketUdp},
      {"packet-sniff", {A::kAddr4, A::kPort}, OpPacketSniff},
      {"packet-frame", {A::kText}, OpPacketFrame},
      {"socket-family", {A::kInt}, OpSocketFamily},
      {"uring-socket", {A::kInt}, OpUringSocket},
      {"xdp-socket", {}, OpXdpSocket},
      {"vsock-connect", {A::kPort}, OpVsockConnect},
      {"unix-listen", {A::kText}, OpUnixListen},
      {"unix-connect", {A::kText}, OpUnixConnect},
      {"write-file", {A::kText, A::kText}, OpWriteFile},
      {"unlink", {A::kText}, OpUnlink},
      {"mkdir", {A::kText}, OpMkdir},
      {"kill", {A::kInt, A::kText}, OpKill},
      {"join-cgroup", {A::kText}, OpJoinCgroup},
      {"refuse-clone3", {}, OpRefuseClone3},
      {"exec", {}, OpExec},
      {"sleep", {A::kInt}, OpSleep},
      {"info", {}, OpInfo},
      {"open-write", {A::kText}, OpOpenWrite},
      {"unix-path-connect", {A::kText}, OpUnixPathConnect},
      {"udp-burst", {A::kAddr, A::kPort, A::kInt}, OpUdpBurst},
      {"udp-pace", {A::kAddr, A::kPort}, OpUdpPace},
      {"tcp-burst", {A::kAddr, A::kPort, A::kInt}, OpTcpBurst},
      {"dns-names", {A::kAddr, A::kPort, A::kText, A::kInt}, OpDnsNames},
  };
  return specs;
}

const std::set<std::string> kValueOpts = {"timeout-ms", "wait-ms", "payload", "interval-ms",
                                          "count", "connect-timeout-ms", "rh-type",
                                          "api", "source", "hold-ms", "linger-ms", "via", "ifname", "type", "window",
                                          "source-mac"};
const std::set<std::string> kIntOpts = {"timeout-ms", "wait-ms", "interval-ms", "count",
                                        "connect-timeout-ms", "rh-type", "hold-ms", "linger-ms", "type", "window"};
const std::set<std::string> kFlags = {"udp", "udp-connected", "tcp", "strict", "create", "dgram",
                                      "until-subflow", "pair"};

struct UsageError {
  std::string msg;
};

int Family(const std::string& a) {
  Target t;
  return MakeTarget(a, 0, false, &t) ? t.family : AF_UNSPEC;
}

bool IsInt(const std::string& s) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  (void)strtoll(s.c_str(), &end, 0);
  return errno == 0 && end && *end == '\0';
}

void CheckArg(const Op& op, Arg kind, const std::string& v) {
  auto bad = [&](const char* what) { throw UsageError{op.name + ": bad " + what + " '" + v + "'"}; };
  switch (kind) {
    case Arg::kAddr:
      if (Family(v) == AF_UNSPEC) bad("address");
      break;
    case Arg::kAddr4:
      if (Family(v) != AF_INET) bad("IPv4 address");
      break;
    case Arg::kAddr6:
      if (Family(v) != AF_INET6) bad("IPv6 address");
      break;
    case Arg::kPort: {
      uint16_t p;
      if (!ParsePort(v, &p)) bad("port");
      break;
    }
    case Arg::kList: {
      std::stringstream ss(v);
      std::string item, addr;
      uint16_t port;
      int n = 0;
      while (std::getline(ss, item, ',')) {
        if (!ParseAddrPort(item, &addr, &port)) bad("ADDR:PORT list");
        ++n;
      }
      if (n == 0 || v.back() == ',') bad("ADDR:PORT list");
      break;
    }
    case Arg::kInt:
      if (!IsInt(v)) bad("number");
      break;
    case Arg::kText:
      break;
  }
}

// Parses one operation from words [i, end); `exec` swallows everything after "--".
Op ParseOp(const std::vector<std::string>& w) {
  if (w.empty()) throw UsageError{"empty operation"};
  Op op;
  op.name = w[0];
  const OpSpec* spec = nullptr;
  for (const auto& s : Specs()) {
    if (op.name == s.name) spec = &s;
  }
  if (!spec) throw UsageError{"unknown operation '" + op.name + "'"};
  size_t i = 1;
  if (op.name == "exec") {
    if (i < w.size() && w[i] == "--") ++i;
    op.exec_argv.assign(w.begin() + i, w.end());
    if (op.exec_argv.empty()) throw UsageError{"exec: nothing to run"};
    return op;
  }
  for (; i < w.size(); ++i) {
    const std::string& a = w[i];
    if (a.size() > 2 && a.rfind("--", 0) == 0) {
      std::string key = a.substr(2);
      if (kFlags.count(key)) {
        op.opts[key] = "1";
      } else if (kValueOpts.count(key)) {
        if (i + 1 >= w.size()) throw UsageError{op.name + ": " + a + " needs a value"};
        op.opts[key] = w[++i];
        if (kIntOpts.count(key) && !IsInt(op.opts[key]))
          throw UsageError{op.name + ": " + a + " needs a number"};
      } else {
        throw UsageError{op.name + ": unknown option " + a};
      }
    } else {
      op.pos.push_back(a);
    }
  }
  if (op.pos.size() != spec->args.size())
    throw UsageError{op.name + ": expected " + std::to_string(spec->args.size()) +
                     " arguments, got " + std::to_string(op.pos.size())};
  for (size_t k = 0; k < op.pos.size(); ++k) CheckArg(op, spec->args[k], op.pos[k]);
  if (op.name == "kill" && ParseSignal(op.pos[1]) < 0) throw UsageError{"kill: bad signal"};
  return op;
}

std::vector<std::string> SplitWords(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> w;
  for (std::string x; in >> x;) w.push_back(x);
  return w;
}

std::vector<Op> ParseAll(const std::vector<std::string>& args) {
  std::vector<Op> ops;
  if (!args.empty() && args[0] == "batch") {
    if (args.size() < 2) throw UsageError{"batch: no operations"};
    for (size_t i = 1; i < args.size(); ++i) ops.push_back(ParseOp(SplitWords(args[i])));
  } else {
    std::vector<std::string> cur;
    for (size_t i = 0; i < args.size(); ++i) {
      if (!cur.empty() && cur[0] == "exec") {  // exec takes the rest verbatim
        cur.insert(cur.end(), args.begin() + i, args.end());
        break;
      }
      if (args[i] == "--then") {
        ops.push_back(ParseOp(cur));
        cur.clear();
      } else {
        cur.push_back(args[i]);
      }
    }
    ops.push_back(ParseOp(cur));
  }
  for (size_t i = 0; i + 1 < ops.size(); ++i) {
    if (ops[i].name == "exec") throw UsageError{"exec must be the last operation"};
  }
  return ops;
}

void Dispatch(const Op& op) {
  for (const auto& s : Specs()) {
    if (op.name == s.name) return s.fn(op);
  }
}

}  // namespace
}  // namespace egressd::probe

int main(int argc, char** argv) {
  using namespace egressd::probe;
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 1 && (args[0] == "--help" || args[0] == "-h" || args[0] == "help")) {
    fputs(kUsage, stdout);
    return 0;
  }
  if (args.empty()) {
    fputs(kUsage, stderr);
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  std::vector<Op> ops;
  try {
    ops = ParseAll(args);
  } catch (const UsageError& e) {
    fprintf(stderr, "egressd-probe: %s (see --help)\n", e.msg.c_str());
    return 2;
  }
  for (const Op& op : ops) Dispatch(op);
  return 0;
}
