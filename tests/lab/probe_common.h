// egressd-probe internals: one operation per call, one JSON line per attempt.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace egressd::probe {

// A parsed operation: `name pos... [--opt value | --flag]...`.
struct Op {
  std::string name;
  std::vector<std::string> pos;
  std::map<std::string, std::string> opts;
  std::vector<std::string> exec_argv;  // `exec -- ARGV...`

  int Int(const std::string& key, int def) const;
  std::string Str(const std::string& key, const std::string& def) const;
  bool Flag(const std::string& key) const { return opts.count(key) > 0; }
};

// One JSON object, printed as one line and flushed.
class Json {
 public:
  explicit Json(const std::string& op) { Str("op", op); }
  Json& Str(const std::string& k, const std::string& v);
  Json& Int(const std::string& k, long long v);
  Json& Bool(const std::string& k, bool v);
  // "result":"ok", or "result":"error","errno":NAME,"stage":STAGE.
  Json& Ok() { return Str("result", "ok"); }
  Json& Err(int err, const std::string& stage);
  void Emit();

 private:
  std::string body_;
};

std::string ErrName(int err);  // "EPERM"; "ETIMEDOUT" is also used for our own timeouts

// An address with a port, ready for connect/sendto.
struct Target {
  sockaddr_storage sa{};
  socklen_t len = 0;
  int family = AF_UNSPEC;  // of `sa`
  std::string text;        // the address as given (brackets stripped)
  uint16_t port = 0;
};

// The JSON line of an attempt at a destination: {"op","dst","port",...}.
Json TargetLine(const Op& op, const Target& t);

// Parses ADDR (v4, v6, [v6]) and PORT. `force_v6` maps a v4 address to ::ffff:.
bool MakeTarget(const std::string& addr, uint16_t port, bool force_v6, Target* t);
bool ParsePort(const std::string& s, uint16_t* port);
bool ParseAddrPort(const std::string& s, std::string* addr, uint16_t* port);  // a:p, [v6]:p
bool SameEndpoint(const sockaddr_storage& a, const Target& t);  // canonical compare

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { if (fd_ >= 0) close(fd_); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  bool ok() const { return fd_ >= 0; }

 private:
  int fd_;
};

long long NowMs();
// poll() for `events`; returns true when ready, false on timeout (errno=ETIMEDOUT).
bool WaitFd(int fd, short events, int timeout_ms);
// Non-blocking connect with a deadline; 0 or an errno value.
int ConnectWithin(int fd, const Target& t, int timeout_ms);
// Sends `payload` and reads until the same bytes come back. 0 or an errno value;
// `stage` says which step failed ("send" or "recv"); EOF reads as ECONNRESET.
int EchoRoundTrip(int fd, const std::string& payload, int timeout_ms, std::string* stage);
// Waits up to `wait_ms` for a datagram on `fd` from `from` (any source if null).
// *first_err (if given): the first error a receive returned while waiting
// (a connected UDP socket's ICMP error: ECONNREFUSED, EHOSTUNREACH, EACCES),
// 0 if none.
bool WaitEcho(int fd, int wait_ms, const Target* from, int* first_err = nullptr);

constexpr int kDefaultTimeoutMs = 2000;
constexpr int kDefaultWaitMs = 300;
const char* const kDefaultPayload = "ping\n";

// Operation families (arguments already validated by probe_main.cc).
void OpTcp(const Op& op);
void OpUdpBurst(const Op& op);
void OpUdpPace(const Op& op);
void OpTcpBurst(const Op& op);
void OpDnsNames(const Op& op);
void OpTfo(const Op& op);
void OpUringConnect(const Op& op);
void OpSoMark(const Op& op);
void OpMapped6(const Op& op);
void OpHold(const Op& op);

void OpUdpConnected(const Op& op);
void OpUdpSendto(const Op& op);
void OpUdpSendmsg(const Op& op);
void OpUdpSendmmsg(const Op& op);
void OpRthdr6(const Op& op);
void OpLsrr4(const Op& op);

void OpRawUdp(const Op& op);
void OpRawIcmp(const Op& op);
void OpPingSock(const Op& op);

void OpMcastJoin(const Op& op);
void OpSoBroadcast(const Op& op);
void OpPacketUdp(const Op& op);
void OpPacketSniff(const Op& op);
void OpPacketFrame(const Op& op);
void OpSocketFamily(const Op& op);
void OpUringSocket(const Op& op);
void OpXdpSocket(const Op& op);
void OpVsockConnect(const Op& op);
void OpUnixListen(const Op& op);
void OpUnixConnect(const Op& op);
void OpViaDev(const Op& op);
void OpMptcp(const Op& op);
void OpMptcpServe(const Op& op);
void OpScmGive(const Op& op);
void OpScmConnect(const Op& op);

void OpWriteFile(const Op& op);
void OpUnlink(const Op& op);
void OpKill(const Op& op);
void OpMkdir(const Op& op);
void OpJoinCgroup(const Op& op);
void OpRefuseClone3(const Op& op);
void OpExec(const Op& op);
void OpSleep(const Op& op);
void OpInfo(const Op& op);

void OpOpenWrite(const Op& op);
void OpUnixPathConnect(const Op& op);

}  // namespace egressd::probe
