// The DNS endpoint ports the sandbox records hold, kept beside them
// (<records dir>/dns-ports), so that a process without a RegistryIndex
// (egressctl run, egressctl sandbox add) allocates its sandbox's port without
// reading every other record: `egressctl run -- true` on a node with 1,000
// registered sandboxes took 340 ms against 36 ms on an empty one, nearly all
// of it parsing the 1,000 records (12 MB) to find the lowest free port
// (bench/results/2026-12-03-run-notes.md).
//
// Like RegistryIndex, it is a cache, never the truth: it is stamped with the
// records' generation (RecordsGeneration), the generation file's inode and
// the boot id, and trusted only while all three still match (it is written
// without fsync: a power loss may bring back an older one, never trusted in
// the next boot); any record written, removed or
// quarantined by a process that did not also update the ledger (a reconcile,
// the daemon, a register that failed half-way, a crash) leaves it stale, and
// the next register rebuilds it from every record once.  Its size is fixed
// (one 16-bit claim count per port of kDnsPortFirst..kDnsPortLast), so
// reading and searching it costs the same at 1 or 10,000 sandboxes.
// Read and written under the instance lock.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "userspace/control/sandbox_record.h"

namespace egressd::control {

class DnsPortLedger {
 public:
  // The stored ledger if it is current (its stamp matches the records');
  // nullopt when it is absent, stale or unreadable.
  static std::optional<DnsPortLedger> LoadIfCurrent(const SandboxRecords& records);
  // From every record (O(sandboxes)): a record that does not parse holds no
  // port, as for RegistryIndex.
  static absl::StatusOr<DnsPortLedger> Rebuild(const SandboxRecords& records);

  // One more record naming `port` / one fewer (ports outside the range are
  // ignored, as they hold nothing of the range).
  void Claim(uint16_t port);
  void Release(uint16_t port);
  std::optional<uint16_t> LowestFree() const;
  uint32_t claims(uint16_t port) const;

  // Stored (atomically) with the records' current stamp: call it only when
  // the ledger reflects every record as they are now.
  absl::Status Save(const SandboxRecords& records) const;

  // The file it is stored in.
  static std::string PathIn(const SandboxRecords& records);

 private:
  DnsPortLedger();
  std::vector<uint16_t> claims_;  // index: port - kDnsPortFirst
};

}  // namespace egressd::control
