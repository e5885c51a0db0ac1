#include "tap_guest.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

#ifndef EGR_SOURCE_DIR
#error "EGR_SOURCE_DIR: the source tree holding vmtests/tap-guest.sh"
#endif

namespace egressd::test {
namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kTap = "egrtap0";  // in the pod's netns, one per pod

lab::RunResult In(const std::string& netns, std::vector<std::string> argv) {
  return lab::Run({.argv = std::move(argv), .netns = netns});
}

// An interface's MAC read with `ip -j` in its netns (/sys under nsenter would
// show ours).
absl::StatusOr<std::string> MacOf(const std::string& netns, const std::string& ifname) {
  lab::RunResult r = In(netns, {"ip", "-j", "link", "show", ifname});
  if (r.exit_code != 0) return absl::InternalError(absl::StrCat("ip link show ", ifname, ": ", r.Describe()));
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  if (!j.is_array() || j.empty() || !j[0].contains("address"))
    return absl::InternalError(absl::StrCat("no MAC for ", ifname, " in ", r.out));
  return j[0]["address"].get<std::string>();
}

// A temporary directory /tmp/egr-tapguest-<what>-<our pid>-XXXXXX; the
// directories of runs whose process is gone (killed before their teardown)
// are removed first.
absl::StatusOr<std::string> TempDir(const std::string& what) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/tmp", ec)) {
    const std::string name = e.path().filename().string();
    std::vector<std::string> parts = absl::StrSplit(name, '-');
    int pid = 0;
    if (parts.size() == 5 && parts[0] == "egr" && parts[1] == "tapguest" && absl::SimpleAtoi(parts[3], &pid) &&
        pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) {
      std::filesystem::remove_all(e.path(), ec);
    }
  }
  std::string path = absl::StrCat("/tmp/egr-tapguest-", what, "-", getpid(), "-XXXXXX");
  if (mkdtemp(path.data()) == nullptr) return absl::InternalError(absl::StrCat("mkdtemp: ", std::strerror(errno)));
  return path;
}

}  // namespace

TapGuestImage::~TapGuestImage() {
  if (!dir.empty()) std::filesystem::remove_all(dir);
}

absl::StatusOr<std::unique_ptr<TapGuestImage>> PackTapGuest(const std::vector<std::string>& bins) {
  if (access("/vmtest/config", F_OK) == 0)
    return absl::FailedPreconditionError(
        "inside the vmtests guest: it packs no qemu, and a TCG guest inside a TCG guest would boot for minutes "
        "(the host runs this test)");
  auto image = std::make_unique<TapGuestImage>();
  auto dir = TempDir("img");
  if (!dir.ok()) return dir.status();
  image->dir = *dir;
  std::vector<std::string> argv = {std::string(EGR_SOURCE_DIR) + "/vmtests/tap-guest.sh", "--out", image->dir};
  for (const auto& b : bins) argv.insert(argv.end(), {"--bin", b});
  lab::RunResult r = lab::Run({.argv = argv, .timeout = std::chrono::seconds(120)});
  if (r.exit_code == 3) return absl::FailedPreconditionError(r.err);
  if (r.exit_code != 0) return absl::InternalError(absl::StrCat("vmtests/tap-guest.sh: ", r.Describe()));
  for (absl::string_view line : absl::StrSplit(r.out, '\n')) {
    if (absl::ConsumePrefix(&line, "kernel=")) image->kernel = std::string(line);
    if (absl::ConsumePrefix(&line, "release=")) image->release = std::string(line);
  }
  image->initrd = image->dir + "/initramfs.cpio";
  if (image->kernel.empty()) return absl::InternalError("vmtests/tap-guest.sh named no kernel: " + r.out);
  return image;
}

absl::StatusOr<std::unique_ptr<TapGuest>> TapGuest::Boot(const TapGuestImage& image, const lab::Pod& pod,
                                                        std::chrono::milliseconds boot_limit) {
  std::unique_ptr<TapGuest> g(new TapGuest());
  g->pod_ = &pod;
  auto mac = MacOf(pod.netns, pod.ifname);
  if (!mac.ok()) return mac.status();
  g->mac_ = *mac;

  // Kata's tcfilter wiring (tap_guest.h).  From here on the pod namespace's
  // own stack sees nothing arriving on its veth.
  const std::string redirect_to_tap = absl::StrCat(
      "tc filter add dev ", pod.ifname, " parent ffff: protocol all u32 match u8 0 0 action mirred egress redirect dev ",
      kTap);
  const std::string redirect_to_veth = absl::StrCat(
      "tc filter add dev ", kTap, " parent ffff: protocol all u32 match u8 0 0 action mirred egress redirect dev ",
      pod.ifname);
  for (const std::string& cmd :
       {absl::StrCat("ip tuntap add dev ", kTap, " mode tap"), absl::StrCat("ip link set ", kTap, " up"),
        absl::StrCat("tc qdisc add dev ", pod.ifname, " ingress"), redirect_to_tap,
        absl::StrCat("tc qdisc add dev ", kTap, " ingress"), redirect_to_veth}) {
    lab::RunResult r = In(pod.netns, absl::StrSplit(cmd, ' '));
    // ~TapGuest unwires what was done.
    if (r.exit_code != 0) return absl::InternalError(absl::StrCat("wiring the tap: ", cmd, ": ", r.Describe()));
  }

  auto dir = TempDir("console");
  if (!dir.ok()) return dir.status();
  g->dir_ = *dir;
  // qemu's pipe chardev: it writes the console to ser.out and reads ser.in.
  // Both ends opened O_RDWR, so neither open waits for the other side.
  for (const char* f : {"/ser.in", "/ser.out"}) {
    if (mkfifo((g->dir_ + f).c_str(), 0600) != 0)
      return absl::InternalError(absl::StrCat("mkfifo ", g->dir_, f, ": ", std::strerror(errno)));
  }
  g->in_ = open((g->dir_ + "/ser.in").c_str(), O_RDWR | O_CLOEXEC | O_NONBLOCK);
  g->out_ = open((g->dir_ + "/ser.out").c_str(), O_RDWR | O_CLOEXEC | O_NONBLOCK);
  if (g->in_ < 0 || g->out_ < 0) return absl::InternalError(absl::StrCat("open fifo: ", std::strerror(errno)));

  std::mt19937_64 rng(std::random_device{}());
  g->mark_ = absl::StrCat("EGR-TAPGUEST-", absl::Hex(rng()));
  const std::string append = absl::StrCat(
      "console=ttyS0 quiet panic=-1 rdinit=/init no_timer_check EGR_MARK=", g->mark_, " EGR_IP4=", pod.v4,
      " EGR_GW4=", lab::kPodGatewayV4, " EGR_IP6=", pod.v6, " EGR_GW6=", lab::kPodGatewayV6);
  lab::RunSpec spec;
  spec.netns = pod.netns;  // qemu opens the tap in the pod's namespace
  spec.argv = {"qemu-system-x86_64", "-accel", "tcg", "-cpu", "max", "-smp", "1", "-m", "256M", "-nodefaults",
               "-no-user-config", "-display", "none", "-no-reboot",
               "-chardev", absl::StrCat("pipe,id=s0,path=", g->dir_, "/ser"), "-serial", "chardev:s0",
               "-netdev", absl::StrCat("tap,id=n0,ifname=", kTap, ",script=no,downscript=no"),
               "-device", absl::StrCat("virtio-net-pci,netdev=n0,mac=", g->mac_),
               "-kernel", image.kernel, "-initrd", image.initrd, "-append", append};
  spec.timeout = std::chrono::minutes(30);  // a hang guard; ~TapGuest powers it off
  const auto t0 = Clock::now();
  auto bg = lab::Start(spec);
  if (!bg.ok()) return bg.status();
  g->qemu_ = std::make_unique<lab::Background>(std::move(*bg));
  const auto deadline = t0 + boot_limit;
  for (;;) {
    auto line = g->ReadLine(deadline);
    if (!line) {
      return absl::DeadlineExceededError(
          absl::StrCat("the guest (", image.kernel, ") did not say READY within ",
                       std::chrono::duration<double>(boot_limit).count(), " s", g->qemu_->running() ? "" : " (qemu exited)",
                       "; qemu: ", g->qemu_->err(), "\nconsole:\n", g->Console()));
    }
    if (absl::StartsWith(*line, g->mark_ + " FAILED"))
      return absl::InternalError(absl::StrCat("the guest failed: ", *line, "\nconsole:\n", g->Console()));
    if (absl::StartsWith(*line, g->mark_ + " READY")) break;
  }
  g->boot_seconds_ = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!absl::StrContains(g->console_, "mac=" + g->mac_))
    return absl::InternalError(absl::StrCat("the guest's NIC is not the pod's MAC ", g->mac_, ": ", g->Console()));
  return g;
}

std::optional<std::string> TapGuest::ReadLine(Clock::time_point deadline) {
  for (;;) {
    if (size_t nl = buf_.find('\n'); nl != std::string::npos) {
      std::string line = buf_.substr(0, nl);
      buf_.erase(0, nl + 1);
      while (!line.empty() && line.back() == '\r') line.pop_back();
      console_ += line + "\n";
      return line;
    }
    const bool alive = qemu_ && qemu_->running();
    const auto now = Clock::now();
    if (now >= deadline) return std::nullopt;
    pollfd p{.fd = out_, .events = POLLIN, .revents = 0};
    // A short poll while qemu lives (its exit shows no EOF on an O_RDWR FIFO).
    const int ms = alive ? static_cast<int>(std::min<int64_t>(
                               200, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1))
                         : 0;
    if (poll(&p, 1, ms) > 0) {
      char chunk[4096];
      ssize_t n = read(out_, chunk, sizeof chunk);
      if (n > 0) {
        buf_.append(chunk, static_cast<size_t>(n));
        continue;
      }
    }
    if (!alive) return std::nullopt;
  }
}

absl::StatusOr<TapGuest::Result> TapGuest::Run(const std::string& command, std::chrono::milliseconds limit) {
  if (command.find('\n') != std::string::npos) return absl::InvalidArgumentError("a command is one line");
  const int id = next_id_++;
  const std::string line = absl::StrCat(id, " ", command, "\n");
  if (write(in_, line.data(), line.size()) != static_cast<ssize_t>(line.size()))
    return absl::InternalError(absl::StrCat("writing to the guest's console: ", std::strerror(errno)));
  const std::string out_prefix = absl::StrCat(mark_, " OUT ", id, " ");
  const std::string end_prefix = absl::StrCat(mark_, " END ", id, " rc=");
  Result r;
  const auto deadline = Clock::now() + limit;
  for (;;) {
    auto l = ReadLine(deadline);
    if (!l) {
      return absl::DeadlineExceededError(absl::StrCat("the guest did not finish `", command, "` within ",
                                                      std::chrono::duration<double>(limit).count(), " s",
                                                      qemu_->running() ? "" : " (qemu exited)", "\nconsole:\n",
                                                      Console()));
    }
    absl::string_view v = *l;
    if (absl::ConsumePrefix(&v, out_prefix)) {
      absl::StrAppend(&r.out, v, "\n");
    } else if (absl::ConsumePrefix(&v, end_prefix)) {
      if (!absl::SimpleAtoi(v, &r.rc)) return absl::InternalError("bad end marker: " + *l);
      return r;
    }
  }
}

std::string TapGuest::Console(size_t max) const {
  return console_.size() <= max ? console_ : "..." + console_.substr(console_.size() - max);
}

void TapGuest::Unwire() {
  if (pod_ == nullptr) return;
  In(pod_->netns, {"tc", "qdisc", "del", "dev", pod_->ifname, "ingress"});
  In(pod_->netns, {"ip", "link", "del", kTap});
}

TapGuest::~TapGuest() {
  if (qemu_) {
    if (qemu_->running() && in_ >= 0) {
      (void)!write(in_, "off\n", 4);
      qemu_->Wait(std::chrono::milliseconds(static_cast<int>(30000 * lab::TimeScale())));
    }
    qemu_->Stop();
  }
  for (int fd : {in_, out_}) {
    if (fd >= 0) close(fd);
  }
  if (!dir_.empty()) std::filesystem::remove_all(dir_);
  Unwire();
}

}  // namespace egressd::test
