// The fixture of tc_frames_test and tc_neighbour_test: a pod of the test's
// own on the node-routed lab, registered by interface only (its netns: the
// registration reads its MAC and the node's host routes give its addresses),
// attacked from inside by egressd-probe as root with only CAP_NET_RAW
// (RunSpec.hostile) writing hand-built frames (frames.h) on a packet socket,
// as gVisor's netstack or a guest kernel could.  Sysctls a positive control
// turns on are restored at TearDown, registrations removed.
#pragma once

#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "egressd_env.h"
#include "frames.h"
#include "maps/egressd_abi.h"
#include "maps/if_sandbox_table.h"

namespace egressd::test {

class TcFramesBase : public testing::Test {
 protected:
  using Bytes = frames::Bytes;
  using Mac = frames::Mac;

  void SetUp() override {
    EGR_REQUIRE_PRIVILEGES();
    lab().ResetCounters();
  }
  void TearDown() override {
    for (const auto& ifname : registered_) Shared().Ctl({"sandbox", "remove", "--interface", ifname});
    registered_.clear();
    for (auto it = sysctls_.rbegin(); it != sysctls_.rend(); ++it) {
      (void)lab::SetSysctl(std::get<0>(*it), std::get<1>(*it), std::get<2>(*it));
    }
    sysctls_.clear();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  lab::Lab& lab() { return Shared().lab(); }
  // Lab::WaitFor with its 3 s scaled by EGR_TIME_SCALE (the 6.1 guests).
  static bool Eventually(const std::function<bool()>& pred) {
    return lab::Lab::WaitFor(pred, std::chrono::milliseconds(static_cast<int64_t>(3000 * TimeScale())));
  }

  const lab::Pod& NewPod() {
    auto p = lab().AddPod();
    EXPECT_TRUE(p.ok()) << p.status();
    return **p;
  }
  // sandbox add --interface-netns POD ARGS, no cgroup; the lab's Drain
  // markers allowed (every packet of the pod is the sandbox's) unless
  // `markers` is false (a declared target makes the default deny).
  void Register(const lab::Pod& pod, std::vector<std::string> args, bool markers = true) {
    std::vector<std::string> argv = {"sandbox", "add", "--interface-netns", pod.netns};
    argv.insert(argv.end(), args.begin(), args.end());
    for (const char* marker : {lab::kWorldLinkV4, lab::kWorldLinkV6}) {
      if (markers) argv.insert(argv.end(), {"--egress", marker});
    }
    lab::RunResult r = Shared().Ctl(argv);
    ASSERT_EQ(r.exit_code, 0) << r.Describe();
    registered_.push_back(pod.node_ifname);
  }

  // A link's MAC, read with `ip -j -n NETNS link show IF`.
  static Mac LinkMac(const std::string& netns_name, const std::string& ifname) {
    lab::RunResult r = lab::Run({.argv = {"ip", "-j", "-n", netns_name, "link", "show", ifname}});
    EXPECT_EQ(r.exit_code, 0) << r.Describe();
    auto j = nlohmann::json::parse(r.out, nullptr, false);
    Mac m{};
    if (!j.is_array() || j.empty() || !j[0].contains("address") ||
        !frames::ParseMac(j[0]["address"].get<std::string>(), &m)) {
      ADD_FAILURE() << "no MAC for " << ifname << " in " << netns_name << ": " << r.out;
    }
    return m;
  }
  Mac PodMac(const lab::Pod& pod) { return LinkMac(pod.netns_name, pod.ifname); }
  Mac RouterMac(const lab::Pod& pod) { return LinkMac(lab().node_netns_name(), pod.node_ifname); }
  // The pod's IPv6 link-local address (what a router advertisement comes
  // from), once the kernel has made it; empty until then.
  static std::string LinkLocal(const lab::Pod& pod) {
    lab::RunResult r = lab::Run({.argv = {"ip", "-j", "-6", "-n", pod.netns_name, "addr", "show", "dev", pod.ifname}});
    auto j = nlohmann::json::parse(r.out, nullptr, false);
    if (!j.is_array()) return "";
    for (const auto& link : j) {
      for (const auto& a : link.value("addr_info", nlohmann::json::array())) {
        if (a.value("scope", "") == "link") return a.value("local", "");
      }
    }
    return "";
  }

  // Each frame written by `packet-frame` from inside the pod as the hostile
  // sandbox; every send must have been made (a refused socket would pass for
  // a defended destination).
  void Send(const lab::Pod& pod, const std::vector<Bytes>& frames) {
    std::vector<std::string> args;
    for (const auto& f : frames) {
      if (!args.empty()) args.push_back("--then");
      args.insert(args.end(), {"packet-frame", frames::Hex(f)});
    }
    lab::RunResult r = lab().ProbeIn(pod.netns, args, "", /*hostile=*/true);
    EXPECT_EQ(r.exit_code, 0) << r.Describe();
    auto lines = Lines(r);
    ASSERT_EQ(lines.size(), frames.size()) << r.Describe();
    for (auto& l : lines) {
      EXPECT_ATTEMPTED(l, r.Describe());
      EXPECT_TRUE(Ok(l)) << "the frame was written: " << r.Describe();
    }
  }

  // egr_tcstats_v2, summed over CPUs.
  std::vector<uint64_t> Stats() {
    auto s = maps::ReadTcStats(Shared().pin_root());
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : std::vector<uint64_t>(EGR_TC_STAT_MAX, 0);
  }

  // "slot:+n" for each counter that moved since `before` (failure messages).
  std::string StatsDelta(const std::vector<uint64_t>& before) {
    const auto now = Stats();
    std::string out = "tcstats";
    for (size_t i = 0; i < now.size() && i < before.size(); ++i) {
      if (now[i] != before[i]) absl::StrAppend(&out, " ", i, ":+", now[i] - before[i]);
    }
    return out;
  }

  // The tc audit records of `ifname` so far: (reason, destination) of each.
  // A read takes what the ring holds: kept here for the next question.
  const std::vector<std::pair<std::string, std::string>>& TcRecords(const std::string& ifname) {
    lab::RunResult a = Shared().Ctl({"audit", "--type", "tc"});
    EXPECT_EQ(a.exit_code, 0) << a.Describe();
    auto& out = records_[ifname];
    for (const auto& line : absl::StrSplit(a.out, '\n', absl::SkipEmpty())) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_object() || !j.contains("interface") || j["interface"].value("name", "") != ifname) continue;
      std::string dst;
      if (j.contains("IP") && j["IP"].is_object()) dst = j["IP"].value("destination", "");
      const std::pair<std::string, std::string> r(j.value("reason", ""), dst);
      if (std::find(out.begin(), out.end(), r) == out.end()) out.push_back(r);
    }
    return out;
  }
  testing::AssertionResult HasRecord(const std::string& ifname, const std::string& reason,
                                     const std::string& dst = "") {
    std::string seen;
    for (const auto& [r, d] : TcRecords(ifname)) {
      if (r == reason && (dst.empty() || d == dst)) return testing::AssertionSuccess();
      absl::StrAppend(&seen, " ", r, "->", d);
    }
    return testing::AssertionFailure() << "no tc record " << reason << "->" << dst << " of " << ifname
                                       << "; records:" << seen;
  }

  // A file of this test's own (a config), removed at TearDown.
  std::string TempFile(const std::string& name, const std::string& content) {
    if (dir_.empty()) {
      char tmpl[] = "/tmp/egr-tcframes-XXXXXX";
      EXPECT_NE(mkdtemp(tmpl), nullptr);
      dir_ = tmpl;
    }
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << content;
    return path;
  }

  // Sets a sysctl in `netns` for this test, restored at TearDown.
  void Sysctl(const std::string& netns, const std::string& key, const std::string& value) {
    auto old = lab::GetSysctl(netns, key);
    ASSERT_TRUE(old.ok()) << key << ": " << old.status();
    ASSERT_TRUE(lab::SetSysctl(netns, key, value).ok()) << key;
    sysctls_.emplace_back(netns, key, *old);
  }

  std::vector<std::string> registered_;
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> records_;
  std::vector<std::tuple<std::string, std::string, std::string>> sysctls_;
  std::string dir_;
};

}  // namespace egressd::test
