// Pins the layout of every struct the BPF programs share with the control
// plane.  A failure here means the ABI changed: bump EGR_ABI_VERSION and the
// _vN suffix of every map whose layout changed, then update these numbers.
#include "maps/egressd_abi.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cstddef>
#include <string>

namespace {

#define EGR_PIN_SIZE(type, size) \
  static_assert(sizeof(struct type) == (size), #type " size changed")
#define EGR_PIN_OFFSET(type, field, off)              \
  static_assert(offsetof(struct type, field) == (off), \
                #type "." #field " offset changed")

EGR_PIN_SIZE(egr_cgroup_val, 16);
EGR_PIN_OFFSET(egr_cgroup_val, kind, 0);
EGR_PIN_OFFSET(egr_cgroup_val, policy_id, 4);
EGR_PIN_OFFSET(egr_cgroup_val, sandbox_id, 8);

EGR_PIN_SIZE(egr_policy_val, 16);
EGR_PIN_OFFSET(egr_policy_val, default_verdict, 0);
EGR_PIN_OFFSET(egr_policy_val, deny_action, 1);
EGR_PIN_OFFSET(egr_policy_val, flags, 2);
EGR_PIN_OFFSET(egr_policy_val, pad0, 3);
EGR_PIN_OFFSET(egr_policy_val, refcount, 4);
EGR_PIN_OFFSET(egr_policy_val, content_hash, 8);

// LPM keys: the kernel reads prefixlen first and the data right after it, so
// any padding would become part of the matched prefix.
EGR_PIN_SIZE(egr_lpm4_key, 12);
EGR_PIN_OFFSET(egr_lpm4_key, prefixlen, 0);
EGR_PIN_OFFSET(egr_lpm4_key, policy_id, 4);
EGR_PIN_OFFSET(egr_lpm4_key, addr, 8);

EGR_PIN_SIZE(egr_lpm6_key, 24);
EGR_PIN_OFFSET(egr_lpm6_key, prefixlen, 0);
EGR_PIN_OFFSET(egr_lpm6_key, policy_id, 4);
EGR_PIN_OFFSET(egr_lpm6_key, addr, 8);

EGR_PIN_SIZE(egr_port_range, 4);
EGR_PIN_OFFSET(egr_port_range, first, 0);
EGR_PIN_OFFSET(egr_port_range, last, 2);

static_assert(EGR_MAX_PORT_RANGES == 8, "egr_allow_val size changed");
EGR_PIN_SIZE(egr_allow_val, 40);
EGR_PIN_OFFSET(egr_allow_val, nranges, 0);
EGR_PIN_OFFSET(egr_allow_val, flags, 4);
EGR_PIN_OFFSET(egr_allow_val, ranges, 8);

EGR_PIN_SIZE(egr_prot_val, 4);
EGR_PIN_OFFSET(egr_prot_val, flags, 0);

EGR_PIN_SIZE(egr_resolved_key, 24);
EGR_PIN_OFFSET(egr_resolved_key, sandbox_id, 0);
EGR_PIN_OFFSET(egr_resolved_key, addr, 8);

EGR_PIN_SIZE(egr_resolved_val, 32);
EGR_PIN_OFFSET(egr_resolved_val, expires_boot_ns, 0);
EGR_PIN_OFFSET(egr_resolved_val, name_ids, 8);
EGR_PIN_OFFSET(egr_resolved_val, keep_s, 24);
EGR_PIN_OFFSET(egr_resolved_val, qname_id, 28);

EGR_PIN_SIZE(egr_resuse_val, 16);
EGR_PIN_OFFSET(egr_resuse_val, last_used_ns, 0);
EGR_PIN_OFFSET(egr_resuse_val, socks, 8);
EGR_PIN_OFFSET(egr_resuse_val, pad0, 12);

EGR_PIN_SIZE(egr_sock_val, 64);
EGR_PIN_OFFSET(egr_sock_val, addr, 0);
EGR_PIN_OFFSET(egr_sock_val, port, 16);
EGR_PIN_OFFSET(egr_sock_val, flags, 18);
EGR_PIN_OFFSET(egr_sock_val, policy_id, 20);
EGR_PIN_OFFSET(egr_sock_val, sandbox_id, 24);
EGR_PIN_OFFSET(egr_sock_val, pad0, 32);
EGR_PIN_OFFSET(egr_sock_val, dns_orig, 40);
EGR_PIN_OFFSET(egr_sock_val, dns_orig_port, 56);
EGR_PIN_OFFSET(egr_sock_val, pad1, 58);
EGR_PIN_OFFSET(egr_sock_val, pad2, 60);

EGR_PIN_SIZE(egr_dns_val, 24);
EGR_PIN_OFFSET(egr_dns_val, addr6, 0);
EGR_PIN_OFFSET(egr_dns_val, addr4, 16);
EGR_PIN_OFFSET(egr_dns_val, port, 20);
EGR_PIN_OFFSET(egr_dns_val, flags, 22);

EGR_PIN_SIZE(egr_dnsep_key, 24);
EGR_PIN_OFFSET(egr_dnsep_key, addr, 0);
EGR_PIN_OFFSET(egr_dnsep_key, port, 16);
EGR_PIN_OFFSET(egr_dnsep_key, pad0, 18);
EGR_PIN_OFFSET(egr_dnsep_key, pad1, 20);

EGR_PIN_SIZE(egr_dnsep_val, 8);
EGR_PIN_OFFSET(egr_dnsep_val, sandbox_id, 0);

EGR_PIN_SIZE(egr_config_val, 16);
EGR_PIN_OFFSET(egr_config_val, node_netns_cookie, 0);
EGR_PIN_OFFSET(egr_config_val, flags, 8);
EGR_PIN_OFFSET(egr_config_val, pad0, 12);

// The audit trail (issue 13).
EGR_PIN_SIZE(egr_event_key, 48);
EGR_PIN_OFFSET(egr_event_key, sandbox_id, 0);
EGR_PIN_OFFSET(egr_event_key, sock_cookie, 8);
EGR_PIN_OFFSET(egr_event_key, daddr, 16);
EGR_PIN_OFFSET(egr_event_key, dport, 32);
EGR_PIN_OFFSET(egr_event_key, kind, 34);
EGR_PIN_OFFSET(egr_event_key, action, 35);
EGR_PIN_OFFSET(egr_event_key, reason, 36);
EGR_PIN_OFFSET(egr_event_key, family, 37);
EGR_PIN_OFFSET(egr_event_key, protocol, 38);
EGR_PIN_OFFSET(egr_event_key, pad0, 39);
EGR_PIN_OFFSET(egr_event_key, epoch, 40);
EGR_PIN_OFFSET(egr_event_key, ifindex, 44);

EGR_PIN_SIZE(egr_event_task, 40);
EGR_PIN_OFFSET(egr_event_task, cgroup_id, 0);
EGR_PIN_OFFSET(egr_event_task, tgid, 8);
EGR_PIN_OFFSET(egr_event_task, pid, 12);
EGR_PIN_OFFSET(egr_event_task, uid, 16);
EGR_PIN_OFFSET(egr_event_task, gid, 20);
EGR_PIN_OFFSET(egr_event_task, comm, 24);

EGR_PIN_SIZE(egr_event, 120);
EGR_PIN_OFFSET(egr_event, key, 0);
EGR_PIN_OFFSET(egr_event, task, 48);
EGR_PIN_OFFSET(egr_event, boot_ns, 88);
EGR_PIN_OFFSET(egr_event, seq, 96);
EGR_PIN_OFFSET(egr_event, cpu, 104);
EGR_PIN_OFFSET(egr_event, flags, 108);
// The reserved u16 pad became two u8s (issue 13's match.cidr): layout kept.
EGR_PIN_OFFSET(egr_event, match_plen, 110);
EGR_PIN_OFFSET(egr_event, match_flags, 111);
EGR_PIN_OFFSET(egr_event, match_id, 112);
EGR_PIN_OFFSET(egr_event, pad1, 116);

EGR_PIN_SIZE(egr_fold_val, 64);
EGR_PIN_OFFSET(egr_fold_val, task, 0);
EGR_PIN_OFFSET(egr_fold_val, first_boot_ns, 40);
EGR_PIN_OFFSET(egr_fold_val, count, 48);
EGR_PIN_OFFSET(egr_fold_val, flags, 56);
EGR_PIN_OFFSET(egr_fold_val, match_plen, 58);
EGR_PIN_OFFSET(egr_fold_val, match_flags, 59);
EGR_PIN_OFFSET(egr_fold_val, match_id, 60);

EGR_PIN_SIZE(egr_loss_key, 16);
EGR_PIN_OFFSET(egr_loss_key, sandbox_id, 0);
EGR_PIN_OFFSET(egr_loss_key, epoch, 8);
EGR_PIN_OFFSET(egr_loss_key, pad0, 12);

EGR_PIN_SIZE(egr_loss_val, 8);
EGR_PIN_OFFSET(egr_loss_val, lost, 0);

EGR_PIN_SIZE(egr_budget_val, 8);
EGR_PIN_OFFSET(egr_budget_val, tat_boot_ns, 0);

EGR_PIN_SIZE(egr_auditctl_val, 8);
EGR_PIN_OFFSET(egr_auditctl_val, epoch, 0);
EGR_PIN_OFFSET(egr_auditctl_val, flags, 4);

// Values stored in the __u8 fields of egr_policy_val: they must fit.
static_assert(EGR_VERDICT_DENY == 0 && EGR_VERDICT_ALLOW == 1);
static_assert(EGR_ACTION_REJECT == 0 && EGR_ACTION_DROP == 1);
static_assert(EGR_ABI_VERSION >= 2);

// BPF_OBJ_NAME_LEN is 16 including the terminating NUL.
constexpr size_t kMaxMapName = 15;

// Ends in "_v<digits>": the suffix a layout change bumps.
bool HasVersionSuffix(const std::string& name) {
  const size_t v = name.rfind("_v");
  if (v == std::string::npos || v + 2 == name.size()) return false;
  for (size_t i = v + 2; i < name.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return false;
  }
  return true;
}

TEST(AbiLayout, MapNamesFitAndCarryVersion) {
  const char* const names[] = {
      EGR_MAP_CGROUPS,  EGR_MAP_POLICY,   EGR_MAP_ALLOW4, EGR_MAP_ALLOW6,
      EGR_MAP_PROT4,    EGR_MAP_PROT6,    EGR_MAP_RESOLVED, EGR_MAP_SOCK,
      EGR_MAP_CONFIG,   EGR_MAP_STATS,  EGR_MAP_DNS,    EGR_MAP_DNSEP,
      EGR_MAP_EVENTS,   EGR_MAP_FOLD,   EGR_MAP_LOSS,   EGR_MAP_BUDGET,
      EGR_MAP_AUDITCTL, EGR_MAP_AUDITSEQ, EGR_MAP_RCUSYNC, EGR_MAP_RESUSE,
      EGR_MAP_IFSANDBOX, EGR_MAP_TCSTATS, EGR_MAP_IFPOD, EGR_MAP_IFADDR,
      EGR_MAP_TCDNS,
      EGR_MAP_TCFLOW,   EGR_MAP_FLOWCNT, EGR_MAP_FLOWCFG,
      EGR_MAP_TCREJECT, EGR_MAP_TCQUOTE,
  };
  for (const char* n : names) {
    const std::string name(n);
    EXPECT_LE(name.size(), kMaxMapName) << name;
    EXPECT_TRUE(HasVersionSuffix(name)) << name;
    EXPECT_EQ(name.rfind("egr_", 0), 0u) << name;
  }
}

// Flags that reuse reserved fields: each bit distinct, and the prefix length
// bits leave room for /128 below the "set" bit.
TEST(AbiLayout, ReservedFieldsReusedForAuditKeepTheirRoom) {
  static_assert(EGR_LPM_PLEN_MASK >= 128, "a v6 prefix length fits the mask");
  static_assert((EGR_LPM_PLEN_SET & EGR_LPM_PLEN_MASK) == 0, "the set bit is not a length bit");
  static_assert(sizeof(((egr_policy_val*)nullptr)->flags) == 1);
  static_assert((EGR_POLICY_AUDIT_ONLY & EGR_POLICY_STRICT_AUDIT) == 0);
  static_assert((EGR_POLICY_AUDIT_ONLY | EGR_POLICY_STRICT_AUDIT) <= 0xff, "fits egr_policy_val.flags");
  static_assert((EGR_MATCH_CIDR & EGR_MATCH_CIDR_EMBEDDED_V4) == 0);
  // New reasons and counters are appended: older ones keep their numbers.
  static_assert(EGR_REASON_DNS_ENDPOINT == 19 && EGR_REASON_AUDIT_UNRECORDED == 20);
  static_assert(EGR_STAT_EVENT_LOST == 13 && EGR_STAT_WOULD_DENY == 14 && EGR_STAT_STRICT_DENY == 15);
  SUCCEED();
}

EGR_PIN_SIZE(egr_ifpod_val, 8);
EGR_PIN_OFFSET(egr_ifpod_val, mac, 0);
EGR_PIN_OFFSET(egr_ifpod_val, flags, 6);
EGR_PIN_SIZE(egr_ifaddr_key, 24);
EGR_PIN_OFFSET(egr_ifaddr_key, ifindex, 0);
EGR_PIN_OFFSET(egr_ifaddr_key, pad0, 4);
EGR_PIN_OFFSET(egr_ifaddr_key, addr, 8);
EGR_PIN_SIZE(egr_ifaddr_val, 4);
EGR_PIN_SIZE(egr_tcdns_key, 8);
EGR_PIN_OFFSET(egr_tcdns_key, ifindex, 0);
EGR_PIN_OFFSET(egr_tcdns_key, slot, 4);
EGR_PIN_SIZE(egr_tcdns_val, 48);
EGR_PIN_OFFSET(egr_tcdns_val, sandbox_id, 0);
EGR_PIN_OFFSET(egr_tcdns_val, pod_addr, 8);
EGR_PIN_OFFSET(egr_tcdns_val, orig_addr, 24);
EGR_PIN_OFFSET(egr_tcdns_val, pod_port, 40);
EGR_PIN_OFFSET(egr_tcdns_val, orig_port, 42);
EGR_PIN_OFFSET(egr_tcdns_val, protocol, 44);
EGR_PIN_OFFSET(egr_tcdns_val, pad0, 45);
EGR_PIN_OFFSET(egr_tcdns_val, pad1, 46);

// issue 17: the interface map reuses egr_cgroup_val (one sandbox, one value
// whichever hook judges it), keyed by a __u32 ifindex; its reasons are
// appended and the tc counters have a map of their own.
TEST(AbiLayout, InterfaceSandboxMapSharesTheCgroupValue) {
  static_assert(sizeof(egr_cgroup_val) == 16);
  static_assert(EGR_MAX_IFSANDBOXES == EGR_MAX_CGROUPS);
  static_assert(EGR_REASON_LINK_LOCAL == 21 && EGR_REASON_FRAME == 22 && EGR_REASON_SPOOFED == 23);
  static_assert(EGR_TC_STAT_SPOOFED == 4 && EGR_TC_STAT_DNS_UNMATCHED == 5);
  static_assert(EGR_TC_STAT_DNS_UNMATCHED < EGR_TC_STAT_MAX);
  static_assert(EGR_TC_STAT_LINK_LOCAL == 3 && EGR_TC_STAT_LINK_LOCAL < EGR_TC_STAT_MAX);
  // onDeny reject's counters after DNS steering's and the flow table's, in
  // egr_tcstats_v2's 16 slots; the tc record kind is new and the key's
  // ifindex was its pad (layout kept).
  static_assert(EGR_TC_STAT_REJECT_RST == 8 && EGR_TC_STAT_REJECT_LIMITED == 10);
  static_assert(EGR_TC_STAT_REJECT_LIMITED < EGR_TC_STAT_MAX && EGR_TC_STAT_MAX == 16);
  static_assert(EGR_EVENT_TC == 4 && EGR_EVENT_TC < EGR_EVENT_USER_FIRST);
  static_assert(sizeof(egr_event_key) == 48 && offsetof(egr_event_key, ifindex) == 44);
  static_assert(EGR_ABI_VERSION == 2, "a new map, not a layout change");
  SUCCEED();
}

// issue 17's flow table: the key has no hole (a lookup hashes every byte),
// the kernel owns the value's first 16 bytes (struct bpf_timer).
EGR_PIN_SIZE(egr_flow_key, 48);
EGR_PIN_OFFSET(egr_flow_key, sandbox_id, 0);
EGR_PIN_OFFSET(egr_flow_key, pod_addr, 8);
EGR_PIN_OFFSET(egr_flow_key, peer_addr, 24);
EGR_PIN_OFFSET(egr_flow_key, pod_port, 40);
EGR_PIN_OFFSET(egr_flow_key, peer_port, 42);
EGR_PIN_OFFSET(egr_flow_key, proto, 44);
EGR_PIN_OFFSET(egr_flow_key, pad0, 45);
EGR_PIN_OFFSET(egr_flow_key, pad1, 46);
EGR_PIN_SIZE(egr_flow_val, 40);
EGR_PIN_OFFSET(egr_flow_val, timer, 0);
EGR_PIN_OFFSET(egr_flow_val, last_ns, 16);
EGR_PIN_OFFSET(egr_flow_val, created_ns, 24);
EGR_PIN_OFFSET(egr_flow_val, policy_id, 32);
EGR_PIN_OFFSET(egr_flow_val, flags, 36);
EGR_PIN_OFFSET(egr_flow_val, reason, 37);
EGR_PIN_OFFSET(egr_flow_val, pad0, 38);
EGR_PIN_SIZE(egr_flowcnt_val, 32);
EGR_PIN_OFFSET(egr_flowcnt_val, flows, 0);
EGR_PIN_OFFSET(egr_flowcnt_val, tracked, 8);
EGR_PIN_OFFSET(egr_flowcnt_val, refused_quota, 16);
EGR_PIN_OFFSET(egr_flowcnt_val, refused_full, 24);
EGR_PIN_SIZE(egr_flowcfg_val, 16);
EGR_PIN_OFFSET(egr_flowcfg_val, quota, 0);
EGR_PIN_OFFSET(egr_flowcfg_val, tcp_idle_s, 4);
EGR_PIN_OFFSET(egr_flowcfg_val, tcp_transitory_s, 8);
EGR_PIN_OFFSET(egr_flowcfg_val, udp_idle_s, 12);

TEST(AbiLayout, FlowTableReasonsAndCountersAreAppended) {
  static_assert(EGR_REASON_FLOW == 24 && EGR_REASON_FLOW_UNTRACKED == 25);
  static_assert(EGR_TC_STAT_FLOW_PASS == 6 && EGR_TC_STAT_FLOW_UNTRACKED == 7);
  static_assert(EGR_TC_STAT_FLOW_UNTRACKED < EGR_TC_STAT_MAX, "within egr_tcstats_v2");
  static_assert(EGR_FLOW_INBOUND == 1 && EGR_FLOW_REPLIED == 2 && EGR_FLOW_CLOSING == 4);
  static_assert(EGR_ABI_VERSION == 2, "new maps, not a layout change");
  SUCCEED();
}

TEST(AbiLayout, VersionSuffixCheckRejectsUnversionedNames) {
  EXPECT_TRUE(HasVersionSuffix("egr_x_v12"));
  EXPECT_FALSE(HasVersionSuffix("egr_x"));
  EXPECT_FALSE(HasVersionSuffix("egr_x_v"));
  EXPECT_FALSE(HasVersionSuffix("egr_x_v1a"));
}

}  // namespace
