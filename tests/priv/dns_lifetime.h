// The fixture of issue 12's lifetimes and policy changes over time, end to
// end through the kernel redirect and `egressctl dns serve`
// (dns_lifetime_test.cc, dns_policy_flows_test.cc; docs/dns.md "Lifetimes
// and policy changes over time, end to end"): an upstream dnsmasq in the
// lab's world answering the test's names with the TTL the test sets, a
// config with the lifetime the test sets, and reads of what was learned (the
// kernel's map, `egressctl status --json`).  One class for both files: gtest
// wants one fixture type per suite.
#pragma once

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <gtest/gtest.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "dns_sandboxes.h"
#include "egressd_env.h"
#include "lab_dns.h"
#include "maps/egressd_abi.h"

namespace egressd::test {

class DnsLifetime : public ::testing::Test {
 protected:
  static constexpr const char* kUpstream = lab::kPublicE4;
  static constexpr const char* kName = "life.example";            // -> 192.0.2.10
  static constexpr const char* kOtherName = "life-b.example";     // -> 192.0.2.11
  static constexpr const char* kAddedName = "life-new.example";   // -> 198.51.100.7
  static constexpr const char* kWildA = "a.example.test";         // -> 192.0.2.200
  static constexpr const char* kWildB = "b.example.test";         // -> 203.0.113.50
  static constexpr const char* kWildcard = "*.example.test";
  static constexpr uint16_t kUdpPort = lab::kUdpPorts[0];  // the lab counts datagrams here
  static constexpr uint16_t kEchoPort = 9081;              // RoundEcho's (round_echo.h)

  static uint64_t BootNs() {
    timespec ts{};
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
  }
  static long long MonoMs() {  // egressd-probe's start_ms clock
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  static long long Num(const lab::ProbeLine& l, const char* key) {
    long long v = -1;
    auto it = l.find(key);
    if (it == l.end() || !absl::SimpleAtoi(it->second, &v)) return -1;
    return v;
  }
  static std::string FirstLine(const std::string& s) {
    return std::string(absl::StripAsciiWhitespace(s.substr(0, s.find('\n'))));
  }
  static std::chrono::milliseconds Scaled(std::chrono::milliseconds d) {
    return std::chrono::milliseconds(static_cast<long long>(d.count() * TimeScale()));
  }

  void SetUp() override {
    EGR_REQUIRE_PRIVILEGES();
    lab().ResetCounters();
    char dir[] = "/run/egr-dnslife-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
  }
  void TearDown() override {
    if (serve_) serve_->Stop();
    sandboxes_.RemoveAll();
    upstream_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  lab::Lab& lab() { return Shared().lab(); }

  // (Re)starts the upstream answering every name above with `ttl`
  // (dnsmasq's --host-record TTL field): a restart is how a test changes the
  // TTL a name is answered with.
  // `more`: further (name, address) records, answered the same way.
  void Upstream(uint32_t ttl, std::vector<std::pair<const char*, const char*>> more = {}) {
    upstream_.reset();  // stopped and reaped: its port is free again
    std::vector<std::string> args;
    std::vector<std::pair<const char*, const char*>> records = {
        {kName, lab::kPublicA4}, {kOtherName, lab::kPublicB4}, {kAddedName, lab::kPublicD4},
        {kWildA, lab::kPublicC4}, {kWildB, lab::kPublicF4}};
    records.insert(records.end(), more.begin(), more.end());
    for (auto [name, addr] : records) {
      args.push_back(absl::StrCat("--host-record=", name, ",", addr, ",", ttl));
    }
    auto u = lab::DnsServer::Start(
        lab::DnsServerSpec{.netns = lab().world_netns(), .listen = {kUpstream}, .extra_args = args});
    ASSERT_TRUE(u.ok()) << u.status();
    upstream_ = std::move(*u);
  }
  // A config with the lifetime given (empty: the defaults), and dns serve on it.
  std::string Config(const std::string& lifetime) {
    const std::string path = absl::StrCat(dir_, "/egressd.yaml");
    std::ofstream(path) << "dns:\n  upstreams: [" << kUpstream << "]\n  endpoint4: " << lab::kPodGatewayV4
                        << "\n  endpoint6: \"" << lab::kPodGatewayV6 << "\"\n"
                        << lifetime;
    return path;
  }
  void Serve(const std::string& cfg) {
    auto serve = ServeDns({"--config", cfg});
    ASSERT_TRUE(serve.ok()) << serve.status();
    serve_ = std::move(*serve);
  }
  lab::RunSpec InPodSpec(const DnsSandbox& s, std::vector<std::string> argv) {
    lab::RunSpec spec;
    spec.argv = std::move(argv);
    spec.netns = lab().pod().netns;
    spec.cgroup = s.cgroup;
    spec.hostile = true;
    spec.timeout = Scaled(std::chrono::seconds(30));
    return spec;
  }
  lab::RunResult Probe(const DnsSandbox& s, const std::string& op) {
    return lab::Run(InPodSpec(s, {lab::BinaryPath("egressd-probe"), "batch", op}));
  }
  // One probe operation's single line (`tcp ADDR 80` by default).
  lab::ProbeLine Connect(const DnsSandbox& s, const std::string& addr, const std::string& op = "tcp",
                         uint16_t port = 80) {
    lab::RunResult r = Probe(s, absl::StrCat(op, " ", addr, " ", port));
    auto lines = Lines(r);
    EXPECT_EQ(lines.size(), 1u) << r.Describe();
    return lines.empty() ? lab::ProbeLine{} : lines[0];
  }
  // dig NAME through the sandbox's redirect (one try).
  lab::RunResult Dig(const DnsSandbox& s, const std::string& name, bool short_form) {
    std::vector<std::string> argv = {"dig", "+time=2", "+tries=1"};
    if (short_form) argv.push_back("+short");
    argv.insert(argv.end(), {"@8.8.8.8", name});
    return lab::Run(InPodSpec(s, argv));
  }
  // Its first answer line.
  std::string Resolve(const DnsSandbox& s, const std::string& name) {
    lab::RunResult d = Dig(s, name, /*short_form=*/true);
    EXPECT_EQ(d.exit_code, 0) << d.Describe();
    return FirstLine(d.out);
  }
  // `egressd-probe hold` in the sandbox, in the background: one TCP (or,
  // with `udp`, connected UDP) socket echoing "round i" every interval.
  lab::Background Hold(const DnsSandbox& s, const std::string& addr, uint16_t port, std::chrono::milliseconds interval,
                       int count, std::chrono::milliseconds round_timeout, bool udp) {
    std::string op = absl::StrCat("hold ", addr, " ", port, " --interval-ms ", interval.count(), " --count ", count,
                                  " --timeout-ms ", round_timeout.count(), udp ? " --udp" : "");
    lab::RunSpec spec = InPodSpec(s, {lab::BinaryPath("egressd-probe"), "batch", op});
    // A hang guard past the rounds' own length.
    spec.timeout = interval * count + round_timeout * count + Scaled(std::chrono::seconds(60));
    auto bg = lab::Start(spec);
    EXPECT_TRUE(bg.ok()) << bg.status();
    return bg.ok() ? std::move(*bg) : lab::Background();
  }
  // The next `n` round lines of a running hold (fails the test on a missing one).
  std::vector<lab::ProbeLine> ReadRounds(lab::Background& bg, int n) {
    std::vector<lab::ProbeLine> out;
    for (int i = 0; i < n; ++i) {
      auto line = bg.ReadOutLine(Scaled(std::chrono::seconds(10)));
      EXPECT_TRUE(line.has_value()) << bg.err();
      if (!line) break;
      auto l = lab::ParseProbeLine(*line);
      EXPECT_TRUE(l.ok()) << *line;
      if (l.ok()) out.push_back(*l);
    }
    return out;
  }
  // The sandbox's entry for an IPv4 address in egr_resolved_v2, read from
  // the kernel's map.
  std::optional<egr_resolved_val> Entry(const DnsSandbox& s, const std::string& v4) {
    egr_resolved_key want{.sandbox_id = s.id};
    want.addr[10] = want.addr[11] = 0xff;
    EXPECT_EQ(inet_pton(AF_INET, v4.c_str(), &want.addr[12]), 1) << v4;
    int fd = bpf_obj_get((Shared().pin_root() + "/" EGR_MAP_RESOLVED).c_str());
    EXPECT_GE(fd, 0) << "open pinned " << EGR_MAP_RESOLVED;
    if (fd < 0) return std::nullopt;
    egr_resolved_val v{};
    const bool found = bpf_map_lookup_elem(fd, &want, &v) == 0;
    close(fd);
    if (!found) return std::nullopt;
    return v;
  }
  // Seconds from now (CLOCK_BOOTTIME, the map's clock) to the entry's expiry.
  static double ExpiresInS(const egr_resolved_val& v) { return (double(v.expires_boot_ns) - double(BootNs())) / 1e9; }
  // The sandbox's learned entries as `egressctl status --json` lists them,
  // by address.
  std::map<std::string, nlohmann::json> StatusEntries(const DnsSandbox& s) {
    std::map<std::string, nlohmann::json> out;
    lab::RunResult st = Shared().Ctl({"status", "--json"});
    EXPECT_EQ(st.exit_code, 0) << st.Describe();
    nlohmann::json j = nlohmann::json::parse(st.out, nullptr, false);
    EXPECT_TRUE(j.is_object() && j.contains("learned")) << st.out;
    if (!j.is_object() || !j.contains("learned")) return out;
    for (const auto& e : j["learned"]["entries"]) {
      if (e.value("sandbox", uint64_t{0}) == s.id) out[e.value("address", "")] = e;
    }
    return out;
  }

  std::string dir_;
  std::unique_ptr<lab::DnsServer> upstream_;
  DnsSandboxes sandboxes_{"dnslife-"};
  std::optional<lab::Background> serve_;
};

}  // namespace egressd::test
