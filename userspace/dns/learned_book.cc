#include "userspace/dns/learned_book.h"

#include <algorithm>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

#include <spdlog/spdlog.h>

namespace egressd::dns {

size_t LearnedBook::HeldBy(const std::string& name) const {
  auto it = names_.find(name);
  return it == names_.end() ? 0 : it->second.lru.size();
}

void LearnedBook::DropAddr(const net::IpAddr& addr) {
  auto it = addrs_.find(addr);
  if (it == addrs_.end()) return;
  for (const std::string& h : it->second.holders) {
    auto n = names_.find(h);
    if (n == names_.end()) continue;
    auto p = n->second.pos.find(addr);
    if (p != n->second.pos.end()) {
      n->second.lru.erase(p->second);
      n->second.pos.erase(p);
    }
    if (n->second.lru.empty()) names_.erase(n);
  }
  by_expiry_.erase({it->second.expires, addr});
  addrs_.erase(it);
}

bool LearnedBook::Release(const std::string& name, const net::IpAddr& addr) {
  auto n = names_.find(name);
  if (n != names_.end()) {
    auto p = n->second.pos.find(addr);
    if (p != n->second.pos.end()) {
      n->second.lru.erase(p->second);
      n->second.pos.erase(p);
    }
  }
  auto a = addrs_.find(addr);
  if (a == addrs_.end()) return false;
  a->second.holders.erase(name);
  if (!a->second.holders.empty()) return false;
  by_expiry_.erase({a->second.expires, addr});
  addrs_.erase(a);
  return true;
}

void LearnedBook::Expire(uint64_t now_boot_ns) {
  // The kernel allows an entry while now < expiry.
  while (!by_expiry_.empty() && by_expiry_.begin()->first <= now_boot_ns) {
    net::IpAddr addr = by_expiry_.begin()->second;
    DropAddr(addr);
  }
}

void LearnedBook::SeedName(uint32_t qname_id, const std::string& rule, const net::IpAddr& addr,
                           uint64_t expires_boot_ns) {
  std::string key = absl::StrCat(rule, "#", qname_id);
  seeded_.emplace(qname_id, key);
  seeded_keys_.emplace(key, std::make_pair(rule, qname_id));
  Commit(key, addr, expires_boot_ns);
}

void LearnedBook::Adopt(const std::string& name) {
  const uint32_t id = QnameId(name);
  auto s = id == 0 ? seeded_.end() : seeded_.find(id);
  if (s == seeded_.end()) return;
  const std::string key = std::move(s->second);
  seeded_.erase(s);
  seeded_keys_.erase(key);
  auto from = names_.find(key);
  if (from == names_.end()) return;  // its addresses expired or were evicted meanwhile
  Name& to = names_[name];
  // Older than anything the name was answered since: in front, in order.
  for (auto it = from->second.lru.rbegin(); it != from->second.lru.rend(); ++it) {
    auto a = addrs_.find(*it);
    if (a != addrs_.end()) {
      a->second.holders.erase(key);
      a->second.holders.insert(name);
    }
    if (to.pos.count(*it)) continue;
    to.pos.emplace(*it, to.lru.insert(to.lru.begin(), *it));
  }
  names_.erase(from);
}

LearnedBook::Admission LearnedBook::Admit(uint64_t sandbox, const std::string& name,
                                          const std::vector<net::IpAddr>& addrs, uint64_t now_boot_ns,
                                          LearnedAddressSink& sink) {
  Expire(now_boot_ns);
  if (!seeded_.empty()) Adopt(name);
  Admission out;
  const std::set<net::IpAddr> in_answer(addrs.begin(), addrs.end());
  // Addresses of the name found in use (or whose use could not be read: an
  // address is never evicted on a guess) or that the kernel would not
  // forget: skipped for the rest of this answer.
  std::set<net::IpAddr> pinned;
  size_t name_held = HeldBy(name);
  size_t new_to_sandbox = 0;
  auto held_by_name = [&](const net::IpAddr& a) {
    auto n = names_.find(name);
    return n != names_.end() && n->second.pos.count(a) > 0;
  };
  // Evicts the name's least recently answered address that no flow uses and
  // this answer does not carry; false when there is none.
  auto evict_one = [&]() {
    auto n = names_.find(name);
    if (n == names_.end()) return false;
    for (auto it = n->second.lru.begin(); it != n->second.lru.end();) {
      const net::IpAddr victim = *it++;
      if (in_answer.count(victim) || pinned.count(victim)) continue;
      absl::StatusOr<bool> used = sink.InUse(sandbox, victim);
      if (!used.ok() || *used) {
        if (!used.ok()) {
          spdlog::warn("dns: sandbox {}: {}: whether a flow uses {} is unknown, kept: {}", sandbox, name,
                       victim.ToString(), used.status().ToString());
        }
        pinned.insert(victim);
        continue;
      }
      const auto a = addrs_.find(victim);
      const bool last_holder = a != addrs_.end() && a->second.holders.size() == 1;
      if (last_holder) {
        absl::Status s = sink.Forget(sandbox, victim);
        if (!s.ok() && !absl::IsNotFound(s)) {
          spdlog::warn("dns: sandbox {}: {}: could not evict {}: {}", sandbox, name, victim.ToString(), s.ToString());
          ++out.forget_failed;
          pinned.insert(victim);
          continue;
        }
        out.evicted.push_back(victim);
      }
      // Held through another name too: it leaves this name's list only (the
      // kernel still allows it for the other one).
      Release(name, victim);
      --name_held;
      return true;
    }
    return false;
  };
  for (const net::IpAddr& a : addrs) {
    if (held_by_name(a)) {  // a refresh: takes no room
      out.admitted.push_back(a);
      continue;
    }
    if (name_held >= bounds_.per_name && !evict_one()) {
      out.refused.push_back({a, kRefusedNameCap});
      continue;
    }
    const bool new_to_sandbox_addr = addrs_.count(a) == 0;
    if (new_to_sandbox_addr && addrs_.size() + new_to_sandbox >= bounds_.per_sandbox) {
      out.refused.push_back({a, kRefusedSandboxQuota});
      continue;
    }
    ++name_held;
    if (new_to_sandbox_addr) ++new_to_sandbox;
    out.admitted.push_back(a);
  }
  auto n = names_.find(name);
  if (n != names_.end() && n->second.lru.empty()) names_.erase(n);
  return out;
}

void LearnedBook::Commit(const std::string& name, const net::IpAddr& addr, uint64_t expires_boot_ns) {
  Name& n = names_[name];
  auto p = n.pos.find(addr);
  if (p != n.pos.end()) {
    n.lru.splice(n.lru.end(), n.lru, p->second);
  } else {
    n.pos.emplace(addr, n.lru.insert(n.lru.end(), addr));
  }
  Addr& a = addrs_[addr];
  if (a.expires != 0) by_expiry_.erase({a.expires, addr});
  // As the kernel's entry: a later answer never shortens an expiry.
  a.expires = std::max(a.expires, expires_boot_ns);
  by_expiry_.insert({a.expires, addr});
  a.holders.insert(name);
}

void LearnedBook::RetainNames(const std::function<bool(const std::string&)>& keep) {
  for (auto n = names_.begin(); n != names_.end();) {
    auto seeded = seeded_keys_.find(n->first);
    if (keep(seeded == seeded_keys_.end() ? n->first : seeded->second.first)) {
      ++n;
      continue;
    }
    if (seeded != seeded_keys_.end()) {
      seeded_.erase(seeded->second.second);
      seeded_keys_.erase(seeded);
    }
    for (const net::IpAddr& addr : n->second.lru) {
      auto a = addrs_.find(addr);
      if (a == addrs_.end()) continue;
      a->second.holders.erase(n->first);
      if (a->second.holders.empty()) {
        by_expiry_.erase({a->second.expires, addr});
        addrs_.erase(a);
      }
    }
    n = names_.erase(n);
  }
}

size_t SeedBook(LearnedBook& book, const NameScope& scope, const std::vector<LearnedSeed>& seeds,
                uint64_t now_boot_ns) {
  std::map<uint32_t, std::string> rules;
  for (std::string& r : scope.Rules()) rules.emplace(NameId(r), std::move(r));
  // Earliest expiry first: the nearest the map comes to the order the
  // addresses were answered in (each name's least recently answered first).
  std::vector<const LearnedSeed*> order;
  for (const LearnedSeed& s : seeds) order.push_back(&s);
  std::stable_sort(order.begin(), order.end(),
                   [](const LearnedSeed* a, const LearnedSeed* b) { return a->expires_boot_ns < b->expires_boot_ns; });
  size_t booked = 0;
  for (const LearnedSeed* seed : order) {
    const LearnedSeed& s = *seed;
    if (s.expires_boot_ns <= now_boot_ns) continue;
    bool any = false;
    // The most recent rule a wildcard: the question name it answered.
    std::optional<std::string> wildcard_rule;
    if (s.qname_id != 0 && !s.rule_ids.empty()) {
      auto r = rules.find(s.rule_ids.front());
      if (r != rules.end() && absl::StartsWith(r->second, "*.")) wildcard_rule = r->second;
    }
    // Oldest first, so the most recent rule's name is the address's most
    // recently answered holder, as Commit would have left it.
    for (auto id = s.rule_ids.rbegin(); id != s.rule_ids.rend(); ++id) {
      if (*id == 0) continue;
      auto r = rules.find(*id);
      if (wildcard_rule && id + 1 == s.rule_ids.rend()) {
        book.SeedName(s.qname_id, *wildcard_rule, s.addr, s.expires_boot_ns);
      } else {
        book.Commit(r != rules.end() ? r->second : absl::StrCat("rule#", *id), s.addr, s.expires_boot_ns);
      }
      any = true;
    }
    if (!any) book.Commit("rule#0", s.addr, s.expires_boot_ns);
    ++booked;
  }
  return booked;
}

}  // namespace egressd::dns
