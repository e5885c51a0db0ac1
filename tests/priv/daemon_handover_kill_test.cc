// A real new egressd killed (SIGKILL) in the middle of the hand-over
// (issue 15: "if the new one dies during the hand-over, the old one keeps
// serving"), stopped at the exact point by EGRESSD_TEST_HANDOVER_HOLD
// (daemon_handover.cc) rather than by racing its log:
//   - before it says "serving" (it holds the lock, the API listener and every
//     DNS socket, inherited into its proxy): the old one serves on, under a
//     dig loop running across the hold and the kill; every query answered
//     and right, each audited once with gap-free sequence numbers, the API
//     and the audit reader still the old one's, nothing pinned changed, and
//     a real hand-over works afterwards; and with queries waiting in the
//     socket and an API call in the listener's backlog while it starts
//     serving (the old one stopped): none is taken with it (a receive and an
//     accept it started took one each before it waited for "serving");
//   - after it said "serving": the old one has stopped reading and exits 0
//     as superseded (it cannot take back what it gave up); enforcement stays
//     exactly as pinned and connects are judged as before, the sandbox's DNS
//     fails closed (no answer, no query reaches the upstream) and the API is
//     gone, until a restarted daemon serves again (docs/operations.md,
//     "Upgrade");
//   - a reader killed mid-window: the next one gives no sequence number twice.
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "daemon_handover_fixture.h"
#include "pin_snapshot.h"
#include "userspace/common/unique_fd.h"

namespace egressd::test::handover {
namespace {

std::chrono::milliseconds Scaled(int ms) { return std::chrono::milliseconds(static_cast<int>(ms * TimeScale())); }

TEST_F(DaemonHandover, ANewDaemonKilledBeforeItServesLeavesTheOldServingLosingNothing) {
  old_ = StartDaemon();
  ASSERT_TRUE(old_);
  const std::string cg = Put("pod-kill-before", {{"egress", {kAllowed}}});
  const uint64_t id = Call("GET", "/v1/sandboxes/pod-kill-before").body.value("cgroup_id", uint64_t{0});
  ASSERT_NE(id, 0u);
  ASSERT_TRUE(WaitFor([&] { return AuditReader(); }, 5000)) << "the old daemon never took the audit reader";
  const uint64_t audited_before = AuditedQueries(id, nullptr);
  const PinSnapshot pins_before = SnapshotPins(Shared().pin_root());

  auto queries = QueryLoop(cg);
  ASSERT_TRUE(queries);
  std::vector<QueryLine> seen;
  auto read_queries = [&](size_t at_least) { return ReadQueries(*queries, seen, at_least); };
  ASSERT_TRUE(read_queries(8)) << "the query loop never ran: " << queries->err();

  // The new daemon, held where it has taken and inherited every socket and
  // not said "serving".
  new_ = SpawnDaemon("before-serving");
  ASSERT_TRUE(new_);
  auto held = new_->ReadOutLine(Scaled(60000));
  ASSERT_TRUE(held && *held == "handover-hold: before-serving") << "the new daemon never reached the hold: "
                                                                << new_->err();
  EXPECT_TRUE(absl::StrContains(new_->err(), "hand-over: took")) << new_->err();
  // While it holds them, the old one answers (the new one reads nothing).
  const size_t at_hold = seen.size();
  ASSERT_TRUE(read_queries(at_hold + 8)) << "no query answered while the new daemon held the sockets";
  ASSERT_EQ(kill(new_->pid(), SIGKILL), 0);
  RunResult killed = new_->Wait(Scaled(10000));
  new_.reset();
  EXPECT_FALSE(absl::StrContains(killed.out, "ready:")) << "it never served: " << killed.Describe();
  ASSERT_TRUE(WaitFor([&] { return absl::StrContains(old_->err(), "went before it served"); }, 5000)) << old_->err();
  EXPECT_TRUE(old_->running());
  const size_t at_kill = seen.size();
  ASSERT_TRUE(read_queries(at_kill + 8)) << "no query answered after the kill: " << queries->err();
  std::ofstream(stop_file_) << "stop\n";
  RunResult rest = queries->Wait(Scaled(30000));
  for (absl::string_view l : absl::StrSplit(rest.out, '\n', absl::SkipEmpty())) {
    if (auto q = ParseQuery(std::string(l))) seen.push_back(*q);
  }

  // Every query of the loop (before, during the hold, after the kill)
  // answered, and right.
  std::map<std::string, int> asked;
  size_t lost = 0, wrong = 0;
  for (size_t i = 0; i < seen.size(); ++i) {
    const QueryLine& q = seen[i];
    ++asked[q.name + " " + q.transport];
    if (q.status.empty()) {
      ++lost;
      ADD_FAILURE() << "query " << i << " (" << q.name << " over " << q.transport << ") got no answer";
    } else if (q.name == kAllowed) {
      wrong += q.status != "NOERROR" || q.matching < 1;
    } else {
      wrong += q.status != "NXDOMAIN";
    }
  }
  EXPECT_EQ(lost, 0u);
  EXPECT_EQ(wrong, 0u);
  EXPECT_GE(seen.size(), at_kill + 8);

  // The old one still serves the API and reads the audit ring; every query
  // audited exactly once, the sequence numbers without gap or repeat.
  EXPECT_EQ(Call("GET", "/readyz").status, 200);
  EXPECT_EQ(Call("GET", "/v1/sandboxes/pod-kill-before").status, 200);
  EXPECT_TRUE(WaitFor([&] { return AuditReader(); }, 2000));
  std::map<std::string, int> audited;
  ASSERT_TRUE(WaitFor([&] { return AuditedQueries(id, nullptr) >= audited_before + seen.size(); }, 10000))
      << "the audit stream lacks queries";
  size_t seqs = 0;
  EXPECT_EQ(AuditedQueries(id, &audited, &seqs), audited_before + seen.size()) << "each query audited exactly once";
  EXPECT_EQ(audited_before, 0u) << "a new sandbox";
  EXPECT_EQ(audited, asked) << "the audit records name each query as asked";
  // Nothing pinned changed: no pin, map, link or program.
  const PinSnapshot pins_after = SnapshotPins(Shared().pin_root());
  EXPECT_EQ(pins_after, pins_before) << PinDiff(pins_before, pins_after);

  // A real hand-over still works after the killed one.
  new_ = StartDaemon();
  ASSERT_TRUE(new_);
  RunResult old_exit = old_->Wait(Scaled(10000));
  old_.reset();
  EXPECT_EQ(old_exit.exit_code, 0) << old_exit.Describe();
  std::printf("handover kill before serving: %zu queries across the hold and the kill (lost %zu, wrong %zu), audit "
              "seqs %zu gap-free\n",
              seen.size(), lost, wrong, seqs);
}

// The worst moment for the old one's queue: queries wait in the sandbox's
// UDP socket (the old daemon stopped by SIGSTOP, so it reads none) while the
// new daemon, which holds that socket too, starts serving it and then dies
// before "serving".  A receive the new daemon started would take a waiting
// datagram off the shared socket at once (Asio reads speculatively when a
// receive is started, before the loop runs): that query would die with it.
// Every query of the burst must be answered by the old one once it runs.
TEST_F(DaemonHandover, ANewDaemonKilledBeforeItServesTookNoWaitingQueryOrApiCallWithIt) {
  old_ = StartDaemon();
  ASSERT_TRUE(old_);
  const std::string cg = Put("pod-kill-queue", {{"egress", {kAllowed}}});
  ASSERT_FALSE(cg.empty());
  // Datagrams waiting in the proxy's sockets at the pod gateway (Recv-Q).
  std::string ss_error;  // a failing ss reads as "nothing queued": say so
  auto queued = [&] {
    RunSpec ss;
    ss.argv = {"ss", "-Hunl", "src", lab::kPodGatewayV4};
    ss.netns = lab().node_netns();
    RunResult r = lab::Run(ss);
    if (r.exit_code != 0) ss_error = r.Describe();
    uint64_t n = 0;
    for (absl::string_view l : absl::StrSplit(r.out, '\n', absl::SkipEmpty())) {
      std::vector<absl::string_view> f = absl::StrSplit(l, ' ', absl::SkipEmpty());
      uint64_t q = 0;
      if (f.size() > 1 && absl::SimpleAtoi(f[1], &q)) n += q;
    }
    return n;
  };
  // The new one stops itself once it holds the sockets, before it serves
  // them (EGRESSD_TEST_HANDOVER_HOLD's after-take); the old one is stopped.
  new_ = SpawnDaemon("after-take,before-serving");
  ASSERT_TRUE(new_);
  auto took = new_->ReadOutLine(Scaled(60000));
  ASSERT_TRUE(took && *took == "handover-hold: after-take") << new_->err();
  auto stopped = [](pid_t pid) {
    std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
    std::string stat;
    std::getline(in, stat);
    const size_t paren = stat.rfind(')');
    return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'T';
  };
  ASSERT_TRUE(WaitFor([&] { return stopped(new_->pid()); }, 5000)) << "the new daemon never stopped at after-take";
  ASSERT_EQ(kill(old_->pid(), SIGSTOP), 0);
  // A burst of queries now waits in the socket.
  const int rate = 200, seconds = 2;
  auto load = lab::Start(InSandbox(cg, {lab::BinaryPath("egr-dns-load"), "--server", "8.8.8.8", "--name", kAllowed,
                                        "--rate", std::to_string(rate), "--seconds", std::to_string(seconds),
                                        "--timeout-ms", std::to_string(static_cast<int>(5000 * TimeScale()))}));
  ASSERT_TRUE(load.ok()) << load.status();
  const bool waiting = WaitFor([&] { return queued() >= 5; }, 10000);
  // And an API call waiting in the listener's backlog (connected, asked).
  UniqueFd api(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ASSERT_TRUE(api.valid());
  {
    sockaddr_un sun{};
    sun.sun_family = AF_UNIX;
    const std::string path = DaemonSocket();
    ASSERT_LT(path.size(), sizeof(sun.sun_path));
    std::memcpy(sun.sun_path, path.data(), path.size());
    ASSERT_EQ(connect(api.get(), reinterpret_cast<sockaddr*>(&sun), sizeof(sun)), 0) << std::strerror(errno);
    const std::string ask = "GET /readyz HTTP/1.1\r\nHost: egressd\r\nConnection: close\r\n\r\n";
    ASSERT_EQ(write(api.get(), ask.data(), ask.size()), static_cast<ssize_t>(ask.size()));
  }
  // The new one goes on: it serves the sockets (its receives start), stops
  // before "serving", and is killed there; then the old one runs again.
  ASSERT_EQ(kill(new_->pid(), SIGCONT), 0);
  auto held = new_->ReadOutLine(Scaled(60000));
  EXPECT_TRUE(held && *held == "handover-hold: before-serving") << new_->err();
  ASSERT_EQ(kill(new_->pid(), SIGKILL), 0);
  new_->Wait(Scaled(10000));
  new_.reset();
  ASSERT_EQ(kill(old_->pid(), SIGCONT), 0);
  ASSERT_TRUE(waiting) << "no query waited in the socket " << ss_error;
  // The API call is answered by the old one.
  std::string answer;
  for (;;) {
    pollfd p{api.get(), POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(10000 * TimeScale())) <= 0) break;
    char buf[4096];
    const ssize_t n = read(api.get(), buf, sizeof(buf));
    if (n <= 0) break;
    answer.append(buf, static_cast<size_t>(n));
  }
  EXPECT_TRUE(absl::StartsWith(answer, "HTTP/1.1 200")) << "the API call waiting in the backlog: \"" << answer << "\"";
  RunResult out = load->Wait(Scaled((seconds + 15) * 1000));
  ASSERT_EQ(out.exit_code, 0) << out.Describe();
  auto j = nlohmann::json::parse(out.out.substr(out.out.find('{')), nullptr, false);
  ASSERT_TRUE(j.is_object()) << out.Describe();
  EXPECT_EQ(j.value("lost", -1), 0) << "queries the killed daemon took with it: " << j.dump();
  EXPECT_EQ(j["rcodes"].value("NOERROR", 0), rate * seconds) << j.dump();
  EXPECT_TRUE(WaitFor([&] { return absl::StrContains(old_->err(), "went before it served"); }, 5000)) << old_->err();
  EXPECT_EQ(Call("GET", "/readyz").status, 200);
}

TEST_F(DaemonHandover, ANewDaemonKilledAfterItServesLeavesEnforcementAndDnsFailsClosedUntilARestart) {
  old_ = StartDaemon();
  ASSERT_TRUE(old_);
  const std::string cg = Put("pod-kill-after", {{"egress", {kAllowed}}});
  ASSERT_FALSE(cg.empty());
  auto dig = [&](const char* name, bool tcp) {
    RunResult r =
        lab::Run(InSandbox(cg, {"dig", "+time=2", "+tries=1", tcp ? "+tcp" : "+notcp", "+short", "@8.8.8.8", name}));
    return std::string(absl::StripAsciiWhitespace(r.out));
  };
  auto connect = [&](const char* addr) {
    RunResult r = lab::Run(InSandbox(cg, {"setpriv", "--bounding-set", "-all,+net_raw", "--inh-caps", "-all", "--",
                                          lab::BinaryPath("egressd-probe"), "batch",
                                          absl::StrCat("tcp ", addr, " 80 --timeout-ms 3000")}));
    auto lines = Lines(r);
    EXPECT_EQ(lines.size(), 1u) << r.Describe();
    return lines.empty() ? lab::ProbeLine{} : lines[0];
  };
  // The allowed name learned (its address connects), the denied refused.
  ASSERT_EQ(dig(kAllowed, false), lab::kPublicC4);
  ASSERT_TRUE(Ok(connect(lab::kPublicC4)));
  ASSERT_EQ(Errno(connect(lab::kPublicB4)), "EPERM");
  const PinSnapshot pins_before = SnapshotPins(Shared().pin_root());

  new_ = SpawnDaemon("after-serving");
  ASSERT_TRUE(new_);
  auto held = new_->ReadOutLine(Scaled(60000));
  ASSERT_TRUE(held && *held == "handover-hold: after-serving") << "the new daemon never reached the hold: "
                                                               << new_->err();
  // Told "serving", the old one stops reading, releases the audit reader
  // and exits, as in any hand-over.
  RunResult old_exit = old_->Wait(Scaled(10000));
  old_.reset();
  EXPECT_EQ(old_exit.exit_code, 0) << old_exit.Describe();
  EXPECT_TRUE(absl::StrContains(old_exit.err, "superseded")) << old_exit.err;
  ASSERT_EQ(kill(new_->pid(), SIGKILL), 0);
  new_->Wait(Scaled(10000));
  new_.reset();

  // No daemon now.  Enforcement stays exactly as pinned, and in force.
  const PinSnapshot pins_after = SnapshotPins(Shared().pin_root());
  EXPECT_EQ(pins_after, pins_before) << PinDiff(pins_before, pins_after);
  lab().ResetCounters();
  EXPECT_TRUE(Ok(connect(lab::kPublicC4))) << "a learned address still connects";
  EXPECT_EQ(Errno(connect(lab::kPublicB4)), "EPERM") << "a denied one is still refused";
  ASSERT_TRUE(lab().Drain().ok());
  EXPECT_EQ(lab().FlowsOpenedTo(lab::kPublicB4), 0u) << lab().CountersSummary();
  EXPECT_GT(lab().FlowsOpenedTo(lab::kPublicC4), 0u) << lab().CountersSummary();
  // DNS fails closed: no answer over UDP or TCP, and nothing reached the
  // upstream by any path (the count moves again once a daemon serves: the
  // positive control below).
  const uint64_t upstream_before = upstream_->QueriesFor(kAllowed);
  // (The endpoint's sockets closed with their last holder: the redirected
  // query is refused by the node, dig says so.)
  for (bool tcp : {false, true}) {
    const std::string out = dig(kAllowed, tcp);
    EXPECT_FALSE(absl::StrContains(out, lab::kPublicC4)) << (tcp ? "TCP" : "UDP") << ": no answer without a daemon";
    EXPECT_TRUE(absl::StrContains(out, "no servers could be reached")) << (tcp ? "TCP: " : "UDP: ") << out;
  }
  EXPECT_EQ(upstream_->QueriesFor(kAllowed), upstream_before) << "no query went around the proxy";
  // The API is gone with it (its listener closed with the last holder).
  EXPECT_FALSE(daemon::Call(socket(), "GET", "/readyz").ok());

  // A restart (what the DaemonSet does when the pod's container dies)
  // serves again: a fresh start, nothing to take over.
  new_ = StartDaemon();
  ASSERT_TRUE(new_);
  EXPECT_FALSE(absl::StrContains(new_->err(), "hand-over: took")) << new_->err();
  EXPECT_EQ(dig(kAllowed, false), lab::kPublicC4);
  EXPECT_TRUE(WaitFor([&] { return upstream_->QueriesFor(kAllowed) > upstream_before; }, 5000))
      << "the upstream's count is current (a served query shows in it)";
  EXPECT_TRUE(WaitFor([&] { return daemon::Call(socket(), "GET", "/readyz").ok() && Call("GET", "/readyz").status == 200; }, 5000));
  const PinSnapshot pins_restarted = SnapshotPins(Shared().pin_root());
  EXPECT_EQ(pins_restarted, pins_before) << "the restart adopted the pins: " << PinDiff(pins_before, pins_restarted);
}

// The new daemon dies after it took the audit reader (or any reader dies
// mid-window: an OOM kill, the kubelet's SIGKILL after the grace period).
// Its state file was saved at its last window close, but the records it took
// off the ring since are in the spools with their numbers: the next reader
// must number on after them, never give a number twice.  A long fold window
// keeps the state behind the spool for certain.
TEST_F(DaemonHandover, AReaderKilledMidWindowLeavesNoSequenceNumberToBeGivenTwice) {
  old_ = StartDaemon(/*audit_window_ms=*/600000);
  ASSERT_TRUE(old_);
  const std::string cg = Put("pod-kill-reader", {{"egress", {kAllowed}}});
  ASSERT_FALSE(cg.empty());
  ASSERT_TRUE(WaitFor([&] { return AuditReader(); }, 5000)) << "the daemon never took the audit reader";
  const std::string state_path = Shared().runtime_dir() + "/audit/state.json";
  const auto saved_seq = [&] {
    std::ifstream in(state_path);
    auto j = nlohmann::json::parse(in, nullptr, false);
    return j.is_object() ? j.value("seq", uint64_t{0}) : uint64_t{0};
  };
  const auto stream_max = [&] {
    uint64_t m = 0;
    for (const auto& j : Audit()) m = std::max(m, j.value("seq", uint64_t{0}));
    return m;
  };
  auto connects = [&](int n) {
    std::vector<std::string> argv = {"setpriv", "--bounding-set", "-all,+net_raw", "--inh-caps", "-all", "--",
                                     lab::BinaryPath("egressd-probe"), "batch"};
    for (int i = 0; i < n; ++i) argv.push_back(absl::StrCat("tcp ", lab::kPublicB4, " 80 --timeout-ms 3000"));
    RunResult r = lab::Run(InSandbox(cg, argv));
    EXPECT_EQ(Lines(r).size(), static_cast<size_t>(n)) << r.Describe();
  };
  // Kernel records (denied connects) go to the spools as they come off the
  // ring; the state is saved only when a window closes.
  connects(20);
  ASSERT_TRUE(WaitFor([&] { return stream_max() > saved_seq() + 10; }, 10000))
      << "the spool never got ahead of the saved state (state " << saved_seq() << ", spool " << stream_max() << ")";
  const uint64_t spooled = stream_max(), saved = saved_seq();
  const size_t lines_before = Audit().size();
  ASSERT_EQ(kill(old_->pid(), SIGKILL), 0);
  old_->Wait(Scaled(10000));
  old_.reset();

  // The next reader, and records after it.
  new_ = StartDaemon();
  ASSERT_TRUE(new_);
  ASSERT_TRUE(WaitFor([&] { return AuditReader(); }, 5000));
  connects(20);
  ASSERT_TRUE(WaitFor([&] { return Audit().size() >= lines_before + 20; }, 10000)) << "the new reader's records";
  size_t seqs = 0;
  AuditedQueries(0, nullptr, &seqs);  // each number once, none missing
  std::printf("reader killed mid-window: state saved at seq %lu, spool at %lu; after the next reader %zu seqs\n",
              static_cast<unsigned long>(saved), static_cast<unsigned long>(spooled), seqs);
}

}  // namespace
}  // namespace egressd::test::handover
