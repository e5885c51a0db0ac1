// How many addresses a sandbox may learn, and through which names: the
// proxy's book of what each sandbox holds in the kernel's resolved map, per
// question name in least-recently-answered order.  It bounds what any
// upstream can make a sandbox hold:
//   * a per-(sandbox, name) cap: past it, that name's least recently answered
//     addresses that no flow uses are evicted (from the kernel map too,
//     through LearnedAddressSink::Forget); an address a flow uses
//     (LearnedAddressSink::InUse) is never evicted, and when nothing can be
//     evicted the new address is not learned;
//   * a per-sandbox quota of distinct addresses: past it, new addresses are
//     not learned (nothing is evicted for them: one name cannot push out
//     another's).
// The caller removes what is refused from the answer (no client holds an
// address the kernel does not allow).  One book per sandbox, used from the
// proxy's loop thread only.  The book follows expiry (an address past its
// expiry leaves the book: the kernel side collects it or keeps it while a
// flow uses it) and scope updates (RetainNames), never the kernel map itself,
// except once: a proxy restarted seeds each sandbox's book from what the map
// still holds for it (SeedBook), so its quota and caps hold across restarts.
#ifndef EGRESSD_USERSPACE_DNS_LEARNED_BOOK_H_
#define EGRESSD_USERSPACE_DNS_LEARNED_BOOK_H_

#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "userspace/dns/learner.h"
#include "userspace/dns/qname_key.h"
#include "userspace/dns/scope.h"
#include "userspace/net/ip.h"
#include "userspace/policy/deployment_config.h"

namespace egressd::dns {

// Defaults: the deployment config's (userspace/policy/deployment_config.h,
// argued in docs/dns.md, "Bounds").
struct Bounds {
  uint32_t per_sandbox = policy::kDefaultMaxAddressesPerSandbox;
  uint32_t per_name = policy::kDefaultMaxAddressesPerName;
};

// Why an address of an answer was not learned.
inline constexpr char kRefusedNameCap[] = "name-cap";
inline constexpr char kRefusedSandboxQuota[] = "sandbox-quota";

class LearnedBook {
 public:
  // `qname_key`: the node's key for question-name ids (qname_key.h); null:
  // ids are 0 ("not known"), so nothing seeded is adopted and no policy
  // change keeps an address by its question name (both fail closed).
  explicit LearnedBook(Bounds bounds = {}, std::shared_ptr<const QnameKey> qname_key = nullptr)
      : bounds_(bounds), qname_key_(std::move(qname_key)) {}

  // The id the map keeps of question name `name` (egr_resolved_val's
  // qname_id): keyed, so no sandbox can choose a name for its id.
  uint32_t QnameId(std::string_view name) const { return qname_key_ ? qname_key_->Id(name) : 0; }

  struct Refusal {
    net::IpAddr addr;
    const char* why;  // kRefusedNameCap or kRefusedSandboxQuota
  };
  struct Admission {
    std::vector<net::IpAddr> admitted;  // may be written, in the answer's order
    std::vector<Refusal> refused;       // not to be written; remove from the answer
    std::vector<net::IpAddr> evicted;   // forgotten from the kernel for `name`'s cap
    size_t forget_failed = 0;           // evictions the kernel refused (kept)
  };

  // Which of `addrs` (one answer's distinct addresses, for question name
  // `name`) may be written, evicting `name`'s least recently answered
  // addresses that no flow uses where its cap needs room.  Addresses past
  // their expiry at `now_boot_ns` leave the book first.
  Admission Admit(uint64_t sandbox, const std::string& name, const std::vector<net::IpAddr>& addrs,
                  uint64_t now_boot_ns, LearnedAddressSink& sink);

  // `addr` was written for `name` until `expires_boot_ns`: it becomes the
  // name's most recently answered address.
  void Commit(const std::string& name, const net::IpAddr& addr, uint64_t expires_boot_ns);

  // Books `addr`, seeded from the map, under the question name whose QnameId
  // is `qname_id` (the map keeps the name's id, not its text) and that `rule`
  // allowed: held under a key of its own ("<rule>#<id>") until that name's
  // next Admit adopts it, so the name's cap counts what it held before a
  // restart.
  void SeedName(uint32_t qname_id, const std::string& rule, const net::IpAddr& addr, uint64_t expires_boot_ns);

  // Drops the names `keep` says no (a scope update: names the new policy no
  // longer allows).  A seeded name not yet adopted is judged by its rule.  Their addresses leave the book when no other name holds
  // them; the kernel's entries are the kernel side's to keep or drop.
  void RetainNames(const std::function<bool(const std::string&)>& keep);

  size_t addresses() const { return addrs_.size(); }
  size_t names() const { return names_.size(); }
  // Addresses `name` holds now (0 for a name the book does not know).
  size_t HeldBy(const std::string& name) const;
  const Bounds& bounds() const { return bounds_; }

 private:
  struct Name {
    std::list<net::IpAddr> lru;  // front: least recently answered
    std::map<net::IpAddr, std::list<net::IpAddr>::iterator> pos;
  };
  struct Addr {
    uint64_t expires = 0;
    std::set<std::string> holders;  // names whose answers carried it
  };

  void Expire(uint64_t now_boot_ns);
  // Removes `addr` from `name`'s list, and from the book when it was its
  // last holder (returns true then).
  bool Release(const std::string& name, const net::IpAddr& addr);
  void DropAddr(const net::IpAddr& addr);
  // A seeded name's addresses become `name`'s (its first Admit since).
  void Adopt(const std::string& name);

  Bounds bounds_;
  std::shared_ptr<const QnameKey> qname_key_;
  // Seeded names not yet adopted: QnameId -> key, and key -> (rule, QnameId).
  std::map<uint32_t, std::string> seeded_;
  std::map<std::string, std::pair<std::string, uint32_t>> seeded_keys_;
  std::map<std::string, Name> names_;
  std::map<net::IpAddr, Addr> addrs_;
  std::set<std::pair<uint64_t, net::IpAddr>> by_expiry_;
};

// An address the kernel's resolved map held for a sandbox when the proxy
// started (maps/resolved_table.h's List).
struct LearnedSeed {
  net::IpAddr addr;
  uint64_t expires_boot_ns = 0;
  std::vector<uint32_t> rule_ids;  // NameId() of the rules that allowed it, most recent first
  // QnameId() of the question name whose answer last wrote it (the entry's
  // qname_id; 0: not known, an entry written before it was kept).
  uint32_t qname_id = 0;
};

// Fills a fresh book from the map's entries for one sandbox.  The map keeps
// rule ids, not question names, so an address is booked under:
//   * an exact name rule of `scope`: that name, which is the key its later
//     answers use (the per-name cap holds across the restart);
//   * a wildcard rule: the question name that last wrote it (the entry's
//     qname_id, SeedName), so that name's cap holds across the restart too;
//     an entry without one (written before qname_id was kept) under the
//     rule's text ("*.example.com"), for the quota only;
//   * a rule id no rule of `scope` has (a policy change while the proxy was
//     down): "rule#<id>", for the quota only (the next scope update drops it).
// Entries already expired at `now_boot_ns` are not booked (the book never
// counts them; the collector keeps or drops their kernel entries).  Returns
// how many addresses were booked.
size_t SeedBook(LearnedBook& book, const NameScope& scope, const std::vector<LearnedSeed>& seeds,
                uint64_t now_boot_ns);

}  // namespace egressd::dns

#endif  // EGRESSD_USERSPACE_DNS_LEARNED_BOOK_H_
