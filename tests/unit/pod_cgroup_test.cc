// Pod UID -> cgroup (issue 14) on synthetic kubelet layouts in a temp dir
// (no kubelet runs here): both cgroup drivers, every QoS class, a slice root
// (kind's --cgroup-root), containerd's and CRI-O's container scopes below
// the pod (the pod-level directory is what is found), a UID that matches
// twice (400 naming it and both paths), malformed UIDs and the request's
// "exactly one of cgroup and pod_uid"; the inotify watch that follows the
// levels of a held pod's path down as they appear.
#include <stdlib.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "userspace/daemon/cgroup_watch.h"
#include "userspace/daemon/pod_cgroup.h"
#include "userspace/daemon/sandbox_request.h"

namespace egressd::daemon {
namespace {

namespace fs = std::filesystem;

constexpr char kUid[] = "0a1b2c3d-4e5f-6789-abcd-ef0123456789";
constexpr char kU_[] = "0a1b2c3d_4e5f_6789_abcd_ef0123456789";
constexpr char kStaticUid[] = "6d8e1f0a2b3c4d5e6f708192a3b4c5d6";

class TempRoot {
 public:
  TempRoot() {
    char tmpl[] = "/tmp/egr-podcg-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempRoot() { fs::remove_all(path_); }
  void Mkdirs(const std::string& rel) const { fs::create_directories(path_ + "/" + rel); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct LayoutCase {
  const char* name;
  const char* root;                   // below the temp dir: the kubelet's root
  std::vector<std::string> dirs;      // made below the temp dir
  std::string want;                   // the pod's directory below the temp dir
  const char* uid = kUid;
};

class PodLayouts : public ::testing::TestWithParam<LayoutCase> {};

TEST_P(PodLayouts, FindsThePodLevelCgroup) {
  const LayoutCase& c = GetParam();
  TempRoot t;
  for (const auto& d : c.dirs) t.Mkdirs(d);
  const std::string root = t.path() + (c.root[0] ? "/" : "") + c.root;
  auto got = FindPodCgroup({root}, c.uid);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, t.path() + "/" + c.want);
}

const std::string P = std::string("pod") + kUid;
const std::string S = kU_;

INSTANTIATE_TEST_SUITE_P(
    Kubelet, PodLayouts,
    ::testing::Values(
        LayoutCase{"cgroupfs_guaranteed_containerd", "",
                   {"kubepods/" + P + "/4f0e6c7a9b1d", "kubepods/burstable/podother"}, "kubepods/" + P},
        LayoutCase{"cgroupfs_burstable", "", {"kubepods/burstable/" + P + "/4f0e6c7a9b1d"}, "kubepods/burstable/" + P},
        LayoutCase{"cgroupfs_besteffort", "", {"kubepods/besteffort/" + P}, "kubepods/besteffort/" + P},
        LayoutCase{"systemd_guaranteed_containerd", "",
                   {"kubepods.slice/kubepods-pod" + S + ".slice/cri-containerd-4f0e6c7a.scope"},
                   "kubepods.slice/kubepods-pod" + S + ".slice"},
        LayoutCase{"systemd_burstable_crio", "",
                   {"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + S + ".slice/crio-4f0e.scope",
                    "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + S + ".slice/crio-conmon-4f0e.scope"},
                   "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + S + ".slice"},
        LayoutCase{"systemd_besteffort", "",
                   {"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + S + ".slice"},
                   "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + S + ".slice"},
        LayoutCase{"systemd_slice_root_kind", "kubelet.slice",
                   {"kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/"
                    "kubelet-kubepods-burstable-pod" + S + ".slice/cri-containerd-ab.scope"},
                   "kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod" +
                       S + ".slice"},
        LayoutCase{"cgroupfs_custom_root", "k8s", {"k8s/kubepods/besteffort/" + P}, "k8s/kubepods/besteffort/" + P},
        LayoutCase{"static_pod_uid", "", {std::string("kubepods/burstable/pod") + kStaticUid},
                   std::string("kubepods/burstable/pod") + kStaticUid, kStaticUid}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(PodCgroup, NotYetThereIsNotFound) {
  TempRoot t;
  t.Mkdirs("kubepods/burstable/podffffffff-4e5f-6789-abcd-ef0123456789");  // another pod
  t.Mkdirs("kubepods.slice/kubepods-burstable.slice");
  auto got = FindPodCgroup({t.path()}, kUid);
  EXPECT_TRUE(absl::IsNotFound(got.status())) << got.status();
}

TEST(PodCgroup, TwoMatchesAreAmbiguousNamingTheUidAndBothPaths) {
  TempRoot t;
  t.Mkdirs("kubepods/burstable/" + P);
  t.Mkdirs("kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + S + ".slice");
  auto got = FindPodCgroup({t.path()}, kUid);
  ASSERT_TRUE(absl::IsInvalidArgument(got.status())) << got.status();
  const std::string m(got.status().message());
  EXPECT_TRUE(absl::StrContains(m, kUid)) << m;
  EXPECT_TRUE(absl::StrContains(m, "ambiguous")) << m;
  EXPECT_TRUE(absl::StrContains(m, "kubepods/burstable/" + P)) << m;
  EXPECT_TRUE(absl::StrContains(m, "kubepods-besteffort-pod" + S)) << m;
  // Across two roots too.
  TempRoot u;
  u.Mkdirs("kubepods/" + P);
  t.Mkdirs("x");
  EXPECT_TRUE(absl::IsInvalidArgument(FindPodCgroup({t.path(), u.path()}, kUid).status()));
}

TEST(PodCgroup, MalformedUidsAreRefusedNamingThem) {
  TempRoot t;
  for (const char* bad : {"", "0A1B2C3D-4E5F-6789-ABCD-EF0123456789", kU_, "0a1b2c3d-4e5f-6789-abcd-ef012345678",
                          "../../../etc", "0a1b2c3d-4e5f-6789-abcd-ef012345678/", "0a1b2c3d4e5f6789abcdef012345678g",
                          "0a1b2c3d-4e5f-6789-abcd-ef0123456789-"}) {
    auto got = FindPodCgroup({t.path()}, bad);
    ASSERT_TRUE(absl::IsInvalidArgument(got.status())) << bad << ": " << got.status();
    EXPECT_TRUE(absl::StrContains(got.status().message(), std::string("\"") + bad + "\"")) << got.status();
  }
  EXPECT_TRUE(CheckPodUid(kUid).ok());
  EXPECT_TRUE(CheckPodUid(kStaticUid).ok());
}

TEST(PodCgroup, CandidatesUseUnderscoresOnlyInSliceNames) {
  for (const auto& c : PodCgroupCandidates("/sys/fs/cgroup/", kUid)) {
    EXPECT_TRUE(absl::StartsWith(c, "/sys/fs/cgroup/kubepods")) << c;
    if (absl::StrContains(c, ".slice")) {
      EXPECT_TRUE(absl::StrContains(c, kU_)) << c;
    } else {
      EXPECT_TRUE(absl::StrContains(c, kUid)) << c;
    }
  }
  EXPECT_EQ(PodCgroupCandidates("/r", kUid).size(), 6u);
}

TEST(PodCgroupRequest, ExactlyOneOfCgroupAndPodUid) {
  auto both = ParseSandboxRequest(std::string(R"({"cgroup": "/x", "pod_uid": ")") + kUid + "\"}");
  ASSERT_FALSE(both.ok());
  EXPECT_TRUE(absl::StrContains(both.status().message(), "exactly one")) << both.status();
  auto none = ParseSandboxRequest("{}");
  ASSERT_FALSE(none.ok());
  EXPECT_TRUE(absl::StrContains(none.status().message(), "pod_uid")) << none.status();
  auto bad = ParseSandboxRequest(R"({"pod_uid": "not-a-uid"})");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "field pod_uid: \"not-a-uid\" is not a pod UID"))
      << bad.status();
  auto ok = ParseSandboxRequest(std::string(R"({"pod_uid": ")") + kUid + "\"}");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->pod_uid, kUid);
  EXPECT_TRUE(ok->cgroup.empty());
  EXPECT_EQ(ToJson(*ok).value("pod_uid", ""), kUid);
  EXPECT_FALSE(ToJson(*ok).contains("cgroup"));
}

TEST(CgroupWatch, FollowsTheLevelsOfAPathDownAsTheyAppear) {
  TempRoot t;
  const std::string target = t.path() + "/a/b/c";
  EXPECT_EQ(NearestExistingDirectory(target), t.path());
  boost::asio::io_context io;
  int events = 0;
  std::unique_ptr<CgroupWatch> w;
  w = std::make_unique<CgroupWatch>(io, [&] {
    ++events;
    ASSERT_TRUE(w->Arm({target}).ok());
  });
  ASSERT_TRUE(w->Start().ok());
  ASSERT_TRUE(w->Arm({target}).ok());
  EXPECT_EQ(w->watched(), std::set<std::string>{t.path()});
  // Each mkdir is one event on the watched level (no timer: run_one_for
  // returns early only on the event).
  std::string at = t.path();
  for (const char* level : {"a", "b"}) {
    at += std::string("/") + level;
    ASSERT_EQ(mkdir(at.c_str(), 0755), 0);
    const int before = events;
    while (events == before && io.run_one_for(std::chrono::seconds(5)) > 0) {
    }
    ASSERT_GT(events, before) << "no event for " << at;
    EXPECT_EQ(w->watched(), std::set<std::string>{at});
  }
  // Another directory beside the path is an event too, and moves nothing.
  ASSERT_EQ(mkdir((at + "/other").c_str(), 0755), 0);
  const int before = events;
  while (events == before && io.run_one_for(std::chrono::seconds(5)) > 0) {
  }
  EXPECT_EQ(w->watched(), std::set<std::string>{at});
  ASSERT_EQ(mkdir(target.c_str(), 0755), 0);
  ASSERT_TRUE(w->Arm({target}).ok());
  EXPECT_TRUE(w->watched().empty()) << "the path exists: nothing left to wait for";
  EXPECT_EQ(CgroupWatch::DirsFor({target}), std::set<std::string>{});
}

}  // namespace
}  // namespace egressd::daemon
