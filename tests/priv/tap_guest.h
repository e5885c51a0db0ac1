// A guest kernel behind a lab pod's tap (issue 17, a VM runtime's sandbox):
// Debian 12's 6.1 (vmtests/run.sh's kernel) under qemu with TCG, its
// virtio-net NIC on a tap in the pod's network namespace, wired to the pod's
// veth the way Kata Containers' "tcfilter" network model does it: a tc
// ingress qdisc on both, and a u32 match-all filter whose mirred action
// redirects every frame arriving on the veth to the tap's egress (into the
// guest) and every frame the guest sends to the veth's egress (out to the
// node).  The pod namespace keeps no traffic of its own: the guest's NIC has
// the veth's MAC and the pod's addresses and routes, so to the node (and
// egressd's tc program on the node end, which drops any frame whose source
// MAC or address is not the pod's) the guest is the pod.  Kata and
// Firecracker themselves need KVM, which this machine lacks.
//
// The guest (vmtests/tap-guest.sh packs it; vmtests/tap-guest-init.sh is its
// /init) runs the commands the test writes to its serial console and prints
// their output between markers carrying a nonce; Run() waits for a command's
// end marker, never a fixed time.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lab.h"

namespace egressd::test {

// The packed initramfs and the kernel to boot it with.
struct TapGuestImage {
  std::string dir;      // a temporary directory holding initramfs.cpio (removed by ~TapGuestImage)
  std::string initrd;
  std::string kernel;
  std::string release;
  ~TapGuestImage();
};

// Packs the guest (vmtests/tap-guest.sh) with `bins` in its /usr/bin.
// FailedPrecondition naming what to install when qemu, the kernel or busybox
// is missing (or inside the vmtests guest, which packs no qemu); another error
// when packing failed.
absl::StatusOr<std::unique_ptr<TapGuestImage>> PackTapGuest(const std::vector<std::string>& bins);

class TapGuest {
 public:
  // Wires a tap into `pod` (above), boots `image` behind it and waits (at
  // most `boot_limit`) for the guest's READY.  The error carries the console.
  static absl::StatusOr<std::unique_ptr<TapGuest>> Boot(const TapGuestImage& image, const lab::Pod& pod,
                                                        std::chrono::milliseconds boot_limit);
  // Powers the guest off (or kills qemu) and takes the tap and filters out of
  // the pod.
  ~TapGuest();

  struct Result {
    int rc = -1;
    std::string out;  // the command's stdout and stderr, a line each
  };
  // `command` (one line, run by the guest's sh -c) and its result; an error
  // when the guest did not finish it within `limit` (or died).
  absl::StatusOr<Result> Run(const std::string& command, std::chrono::milliseconds limit);

  double boot_seconds() const { return boot_seconds_; }
  const std::string& mac() const { return mac_; }
  // The console so far, for failure messages (its last `max` bytes).
  std::string Console(size_t max = 4000) const;

 private:
  TapGuest() = default;
  // The next console line (without "\r\n") within `deadline`; nullopt on
  // timeout or when qemu exited.
  std::optional<std::string> ReadLine(std::chrono::steady_clock::time_point deadline);
  void Unwire();

  const lab::Pod* pod_ = nullptr;
  std::string dir_;  // the console FIFOs
  std::string mark_;
  std::string mac_;
  int in_ = -1, out_ = -1;
  std::string buf_, console_;
  std::unique_ptr<lab::Background> qemu_;
  int next_id_ = 1;
  double boot_seconds_ = 0;
};

}  // namespace egressd::test
