#include "userspace/control/dns_port_ledger.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <string>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "userspace/common/atomic_file.h"
#include "userspace/common/errors.h"
#include "userspace/common/unique_fd.h"
#include "userspace/control/registry.h"

namespace egressd::control {
namespace {

constexpr char kMagic[8] = {'E', 'G', 'R', 'P', 'O', 'R', 'T', '1'};
constexpr size_t kPorts = kDnsPortLast - kDnsPortFirst + 1;

// What the ledger was current with: the generation counter, the inode of
// the file holding it (a counter file removed and started again at 1 is
// another inode, so an old ledger never passes for current) and the boot.
// The ledger is written without fsync (it is a cache: three writes per
// `run`, each fsync 2-3 ms on this VM's ext4), and so is the counter; within
// one boot every process sees what the others wrote, but after a power loss
// either may come back older than the records (which are fsynced), so a
// ledger of another boot is never trusted.
struct Stamp {
  uint64_t generation = 0;
  uint64_t inode = 0;
  std::array<char, 36> boot{};
  bool operator==(const Stamp& o) const {
    return generation == o.generation && inode == o.inode && boot == o.boot;
  }
};

// The file's layout: magic, stamp, then one claim count per port (host byte
// order: the ledger never leaves the node that wrote it).
struct Header {
  char magic[8];
  uint64_t generation;
  uint64_t inode;
  std::array<char, 36> boot;
};

// /proc/sys/kernel/random/boot_id: a UUID new at every boot.
absl::StatusOr<std::array<char, 36>> BootId() {
  constexpr char kPath[] = "/proc/sys/kernel/random/boot_id";
  UniqueFd fd(open(kPath, O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus(errno, absl::StrCat("open ", kPath));
  std::array<char, 36> id{};
  const ssize_t n = read(fd.get(), id.data(), id.size());
  if (n != static_cast<ssize_t>(id.size())) return absl::InternalError(absl::StrCat("read ", kPath, ": short"));
  return id;
}
constexpr size_t kFileBytes = sizeof(Header) + kPorts * sizeof(uint16_t);

absl::StatusOr<Stamp> CurrentStamp(const SandboxRecords& records) {
  const std::string path = records.dir() + "/generation";
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ENOENT) {
      EGR_ASSIGN_OR_RETURN(auto boot, BootId());
      return Stamp{0, 0, boot};
    }
    return ErrnoStatus(errno, absl::StrCat("open ", path));
  }
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return ErrnoStatus(errno, absl::StrCat("stat ", path));
  uint64_t g = 0;
  const ssize_t n = pread(fd.get(), &g, sizeof(g), 0);
  if (n < 0) return ErrnoStatus(errno, absl::StrCat("read ", path));
  EGR_ASSIGN_OR_RETURN(auto boot, BootId());
  return Stamp{n == sizeof(g) ? g : 0, static_cast<uint64_t>(st.st_ino), boot};
}

}  // namespace

DnsPortLedger::DnsPortLedger() : claims_(kPorts, 0) {}

std::string DnsPortLedger::PathIn(const SandboxRecords& records) { return records.dir() + "/dns-ports"; }

std::optional<DnsPortLedger> DnsPortLedger::LoadIfCurrent(const SandboxRecords& records) {
  auto now = CurrentStamp(records);
  if (!now.ok()) return std::nullopt;
  const std::string path = PathIn(records);
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return std::nullopt;
  std::string buf(kFileBytes + 1, '\0');
  size_t have = 0;
  while (have < buf.size()) {
    const ssize_t n = pread(fd.get(), buf.data() + have, buf.size() - have, static_cast<off_t>(have));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    have += static_cast<size_t>(n);
  }
  if (have != kFileBytes) return std::nullopt;  // torn by hand, or another layout
  Header h;
  std::memcpy(&h, buf.data(), sizeof(h));
  if (std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0) return std::nullopt;
  if (!(Stamp{h.generation, h.inode, h.boot} == *now)) return std::nullopt;
  DnsPortLedger l;
  std::memcpy(l.claims_.data(), buf.data() + sizeof(Header), kPorts * sizeof(uint16_t));
  return l;
}

absl::StatusOr<DnsPortLedger> DnsPortLedger::Rebuild(const SandboxRecords& records) {
  std::vector<uint64_t> corrupt;
  EGR_ASSIGN_OR_RETURN(auto all, records.List(&corrupt));
  DnsPortLedger l;
  for (const auto& r : all) {
    if (r.dns) l.Claim(r.dns->port);
  }
  spdlog::debug("dns port ledger rebuilt from {} records", all.size());
  return l;
}

void DnsPortLedger::Claim(uint16_t port) {
  if (port < kDnsPortFirst || port > kDnsPortLast) return;
  uint16_t& c = claims_[port - kDnsPortFirst];
  if (c < UINT16_MAX) ++c;
}

void DnsPortLedger::Release(uint16_t port) {
  if (port < kDnsPortFirst || port > kDnsPortLast) return;
  uint16_t& c = claims_[port - kDnsPortFirst];
  if (c > 0) --c;
}

uint32_t DnsPortLedger::claims(uint16_t port) const {
  if (port < kDnsPortFirst || port > kDnsPortLast) return 0;
  return claims_[port - kDnsPortFirst];
}

std::optional<uint16_t> DnsPortLedger::LowestFree() const {
  for (size_t i = 0; i < kPorts; ++i) {
    if (claims_[i] == 0) return static_cast<uint16_t>(kDnsPortFirst + i);
  }
  return std::nullopt;
}

absl::Status DnsPortLedger::Save(const SandboxRecords& records) const {
  EGR_ASSIGN_OR_RETURN(Stamp now, CurrentStamp(records));
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  h.generation = now.generation;
  h.inode = now.inode;
  h.boot = now.boot;
  std::string buf(kFileBytes, '\0');
  std::memcpy(buf.data(), &h, sizeof(h));
  std::memcpy(buf.data() + sizeof(Header), claims_.data(), kPorts * sizeof(uint16_t));
  EGR_RETURN_IF_ERROR(MakeDirs(records.dir(), 0700));
  // Renamed into place whole (a reader never sees half of it), not fsynced
  // (see Stamp).  One writer at a time: the instance lock is held.
  return WriteFileAtomically(PathIn(records), buf, 0600, FileSync::kWhole);
}

}  // namespace egressd::control
