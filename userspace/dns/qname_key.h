// The node's secret for question-name ids.  A learned entry of
// egr_resolved_v2 keeps one 32-bit id of the question name whose answer
// last wrote it (qname_id).  Two things trust that id: a policy change keeps
// the address of an exact name the new policy still allows when the id says
// it was learned for that very name (ResolvedTable::KeepRules), and a
// restarted proxy books a wildcard's seeded address under that name
// (LearnedBook::Adopt).  The question name is the sandbox's choice, so an
// unkeyed hash (NameId's FNV-1a) would let it pick, offline, a name whose id
// equals a name the operator may narrow to later, and keep that name's
// address through the narrowing.  Keyed with 128 secret bits (SipHash-2-4,
// OpenSSL's), an id is unpredictable without the key, which lives in the
// instance's runtime directory (mode 0600, root's), out of every sandbox's
// reach; an attempt succeeds with probability 2^-32 and cannot be checked.
#ifndef EGRESSD_USERSPACE_DNS_QNAME_KEY_H_
#define EGRESSD_USERSPACE_DNS_QNAME_KEY_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace egressd::dns {

class QnameKey {
 public:
  static constexpr size_t kBytes = 16;
  using Bytes = std::array<uint8_t, kBytes>;

  // The key at `path`, or a new random one written there (mode 0600) when
  // there is none: several processes may race to create it; all end up with
  // the one that was linked in first.  A file of another size is an error
  // naming it (nothing is overwritten).  The directory must exist (the
  // instance's runtime directory, made by whoever takes the instance lock
  // or starts the daemon).
  static absl::StatusOr<std::shared_ptr<const QnameKey>> LoadOrCreate(const std::string& path);
  // The file LoadOrCreate uses for an instance's runtime directory.
  static std::string PathIn(const std::string& runtime_dir) { return runtime_dir + "/dns-qname.key"; }
  // For tests: a key given.
  static absl::StatusOr<std::shared_ptr<const QnameKey>> FromBytes(const Bytes& key);

  ~QnameKey();
  QnameKey(const QnameKey&) = delete;
  QnameKey& operator=(const QnameKey&) = delete;

  // The id of a question name as the proxy holds it (lower case, no trailing
  // dot): SipHash-2-4's 64-bit tag, its low 32 bits; never 0 (0 is "not
  // known" in the map).  ~130 ns here (a copy of the keyed context, one
  // update, the final): once per answer, beside a map write of ~4 µs.
  uint32_t Id(std::string_view name) const;

 private:
  struct Mac;
  explicit QnameKey(std::unique_ptr<Mac> mac);
  std::unique_ptr<Mac> mac_;
};

}  // namespace egressd::dns

#endif  // EGRESSD_USERSPACE_DNS_QNAME_KEY_H_
