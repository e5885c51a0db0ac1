// egr-nflog-reader: the incumbent's audit reader for the bench, an nflog
// (nfnetlink_log) subscriber to `nft ... log group N`, the way a packet log
// of new connections reaches user space.  It does what egressd's exporter
// does per event, in the cheapest honest form: takes each record off the
// netlink socket, decodes the logged packet's destination (IPv4/IPv6,
// TCP/UDP port), and writes one text line per record to --out in one write()
// per batch.  It counts what it could not have: gaps in the instance's
// sequence numbers (records the kernel built and could not deliver: the
// socket's buffer was full) and ENOBUFS errors.
//
//   egr-nflog-reader GROUP [--rcvbuf BYTES] [--qthresh N] [--nlbufsiz BYTES]
//                    [--copy-range BYTES] [--flush-cs N] [--out FILE]
//
// Without options the instance keeps the kernel's defaults (one record per
// netlink message, the socket's default buffer) and copies whole packets, as
// libpcap's nflog does.  Prints "ready group=N" once bound, and on
// SIGTERM/SIGINT, after draining the socket, one JSON line: records, seq_gaps,
// enobufs, socket_drops (/proc/net/netlink), cpu_user_s, cpu_sys_s.  Bad
// arguments exit 2, a failing kernel call exits 1.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <linux/netfilter/nfnetlink_log.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

extern "C" {
#include <libnetfilter_log/libnetfilter_log.h>
}

namespace {

volatile sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

struct Options {
  unsigned group = 0;
  long rcvbuf = 0;        // 0: the socket's default
  long qthresh = 0;       // 0: the kernel's (1)
  long nlbufsiz = 0;      // 0: the kernel's (NLMSG_GOODSIZE)
  long copy_range = 0xffff;
  long flush_cs = -1;     // -1: the kernel's (100 = 1 s)
  std::string out = "/dev/null";
};

struct Reader {
  unsigned long long records = 0, seq_gaps = 0, enobufs = 0, undecoded = 0;
  bool have_seq = false;
  uint32_t next_seq = 0;
  std::string batch;
};

// One record: its sequence number checked, its packet's destination decoded
// and written as a line.
int OnRecord(nflog_g_handle*, nfgenmsg*, nflog_data* nfa, void* data) {
  auto* r = static_cast<Reader*>(data);
  ++r->records;
  uint32_t seq = 0;
  if (nflog_get_seq(nfa, &seq) == 0) {
    if (r->have_seq && seq != r->next_seq) r->seq_gaps += static_cast<uint32_t>(seq - r->next_seq);
    r->have_seq = true;
    r->next_seq = seq + 1;
  }
  char* p = nullptr;
  const int len = nflog_get_payload(nfa, &p);
  char addr[INET6_ADDRSTRLEN] = "?";
  int proto = -1, port = -1;
  const auto* b = reinterpret_cast<const uint8_t*>(p);
  if (len >= 20 && (b[0] >> 4) == 4) {
    const int ihl = (b[0] & 0x0f) * 4;
    inet_ntop(AF_INET, b + 16, addr, sizeof(addr));
    proto = b[9];
    if (len >= ihl + 4) port = (b[ihl + 2] << 8) | b[ihl + 3];
  } else if (len >= 40 && (b[0] >> 4) == 6) {
    inet_ntop(AF_INET6, b + 24, addr, sizeof(addr));
    proto = b[6];
    if (len >= 44) port = (b[42] << 8) | b[43];
  } else {
    ++r->undecoded;
  }
  char line[128];
  const int n = std::snprintf(line, sizeof(line), "%u %s %s %d\n", seq,
                              proto == IPPROTO_TCP ? "TCP" : proto == IPPROTO_UDP ? "UDP" : "other", addr, port);
  r->batch.append(line, static_cast<size_t>(n));
  return 0;
}

// The Drops column of our own socket in /proc/self/net/netlink.
long long SocketDrops(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return -1;
  std::ifstream in("/proc/self/net/netlink");
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string sk, eth, pid, groups, rmem, wmem, dump, locks;
    long long drops = 0;
    unsigned long inode = 0;
    if (f >> sk >> eth >> pid >> groups >> rmem >> wmem >> dump >> locks >> drops >> inode && inode == st.st_ino)
      return drops;
  }
  return -1;
}

bool ParseLong(const char* s, long* v) {
  char* end = nullptr;
  errno = 0;
  *v = std::strtol(s, &end, 0);
  return errno == 0 && end && *end == '\0' && *v >= 0;
}

int Usage(const std::string& why) {
  std::fprintf(stderr,
               "egr-nflog-reader: %s\nusage: egr-nflog-reader GROUP [--rcvbuf BYTES] [--qthresh N] "
               "[--nlbufsiz BYTES] [--copy-range BYTES] [--flush-cs N] [--out FILE]\n",
               why.c_str());
  return 2;
}

int Fail(const char* what) {
  std::fprintf(stderr, "egr-nflog-reader: %s: %s\n", what, std::strerror(errno));
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (argc < 2) return Usage("no group given");
  long group = 0;
  if (!ParseLong(argv[1], &group) || group > 65535) return Usage(std::string("bad group \"") + argv[1] + "\"");
  o.group = static_cast<unsigned>(group);
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return Usage(a + " needs a value");
    const char* v = argv[++i];
    long* target = a == "--rcvbuf" ? &o.rcvbuf : a == "--qthresh" ? &o.qthresh : a == "--nlbufsiz" ? &o.nlbufsiz
                 : a == "--copy-range" ? &o.copy_range : a == "--flush-cs" ? &o.flush_cs : nullptr;
    if (a == "--out") {
      o.out = v;
    } else if (!target) {
      return Usage("unknown option \"" + a + "\"");
    } else if (!ParseLong(v, target)) {
      return Usage(a + ": bad value \"" + v + "\"");
    }
  }
  const int out = open(o.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (out < 0) return Usage("--out \"" + o.out + "\": " + std::strerror(errno));

  nflog_handle* h = nflog_open();
  if (!h) return Fail("nflog_open");
  // Unbinding first is only needed on kernels before 3.8; harmless after.
  nflog_unbind_pf(h, AF_INET);
  nflog_unbind_pf(h, AF_INET6);
  if (nflog_bind_pf(h, AF_INET) < 0 || nflog_bind_pf(h, AF_INET6) < 0) return Fail("nflog_bind_pf");
  nflog_g_handle* gh = nflog_bind_group(h, static_cast<uint16_t>(o.group));
  if (!gh) return Fail("nflog_bind_group (another reader holds the group?)");
  if (nflog_set_mode(gh, NFULNL_COPY_PACKET, static_cast<uint32_t>(o.copy_range)) < 0) return Fail("nflog_set_mode");
  if (nflog_set_flags(gh, NFULNL_CFG_F_SEQ) < 0) return Fail("nflog_set_flags");
  if (o.qthresh && nflog_set_qthresh(gh, static_cast<uint32_t>(o.qthresh)) < 0) return Fail("nflog_set_qthresh");
  if (o.nlbufsiz && nflog_set_nlbufsiz(gh, static_cast<uint32_t>(o.nlbufsiz)) < 0) return Fail("nflog_set_nlbufsiz");
  if (o.flush_cs >= 0 && nflog_set_timeout(gh, static_cast<uint32_t>(o.flush_cs)) < 0) return Fail("nflog_set_timeout");
  const int fd = nflog_fd(h);
  if (o.rcvbuf) {
    const int size = static_cast<int>(o.rcvbuf);
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof(size)) != 0) return Fail("SO_RCVBUFFORCE");
  }
  int rcvbuf = 0;
  socklen_t sl = sizeof(rcvbuf);
  getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, &sl);
  Reader r;
  nflog_callback_register(gh, &OnRecord, &r);

  struct sigaction sa {};
  sa.sa_handler = OnSignal;  // no SA_RESTART: a blocked recv() returns
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  std::printf("ready group=%u rcvbuf=%d\n", o.group, rcvbuf);
  std::fflush(stdout);

  // A netlink message carries up to nlbufsiz bytes of records.
  std::vector<char> buf(1 << 20);
  bool draining = false;
  for (;;) {
    if (g_stop && !draining) {
      draining = true;
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    }
    const ssize_t n = recv(fd, buf.data(), buf.size(), 0);
    if (n < 0) {
      if (errno == ENOBUFS) {
        ++r.enobufs;
        continue;
      }
      if (errno == EINTR) continue;
      if (draining && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      return Fail("recv");
    }
    nflog_handle_packet(h, buf.data(), static_cast<int>(n));
    if (!r.batch.empty()) {
      if (write(out, r.batch.data(), r.batch.size()) != static_cast<ssize_t>(r.batch.size())) return Fail("write");
      r.batch.clear();
    }
  }
  const long long drops = SocketDrops(fd);
  rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  std::printf(
      "{\"records\":%llu,\"seq_gaps\":%llu,\"enobufs\":%llu,\"socket_drops\":%lld,\"undecoded\":%llu,"
      "\"rcvbuf\":%d,\"cpu_user_s\":%.6f,\"cpu_sys_s\":%.6f}\n",
      r.records, r.seq_gaps, r.enobufs, drops, r.undecoded, rcvbuf,
      ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6, ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6);
  nflog_unbind_group(gh);
  nflog_close(h);
  close(out);
  return 0;
}
