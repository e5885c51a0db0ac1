// The BPF side and the control plane agree on every struct of
// maps/egressd_abi.h: the layout the built egressd.bpf.o carries in its BTF
// (what the programs were compiled with) against sizeof/offsetof here (what
// the C++ side compiles with), and the key and value of every map the object
// declares against the ABI struct it should hold.  Reads the object without
// loading it: no root, no BPF syscalls.
#include <linux/bpf.h>

#include <gtest/gtest.h>

#include <cstddef>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "maps/egressd_abi.h"
#include "maps/object_layout.h"

namespace egressd::maps {
namespace {

struct Field {
  std::string name;
  size_t offset;
  size_t size;
};

struct AbiStruct {
  std::string name;
  size_t size;
  std::vector<Field> fields;  // every member, in declaration order
};

#define EGR_FIELD(type, field) \
  Field{#field, offsetof(struct type, field), sizeof(static_cast<struct type*>(nullptr)->field)}
#define EGR_STRUCT(type, ...) AbiStruct{#type, sizeof(struct type), {__VA_ARGS__}}

const std::vector<AbiStruct>& CxxLayouts() {
  static const std::vector<AbiStruct> structs = {
      EGR_STRUCT(egr_cgroup_val, EGR_FIELD(egr_cgroup_val, kind),
                 EGR_FIELD(egr_cgroup_val, policy_id), EGR_FIELD(egr_cgroup_val, sandbox_id)),
      EGR_STRUCT(egr_policy_val, EGR_FIELD(egr_policy_val, default_verdict),
                 EGR_FIELD(egr_policy_val, deny_action), EGR_FIELD(egr_policy_val, flags),
                 EGR_FIELD(egr_policy_val, pad0), EGR_FIELD(egr_policy_val, refcount),
                 EGR_FIELD(egr_policy_val, content_hash)),
      EGR_STRUCT(egr_lpm4_key, EGR_FIELD(egr_lpm4_key, prefixlen),
                 EGR_FIELD(egr_lpm4_key, policy_id), EGR_FIELD(egr_lpm4_key, addr)),
      EGR_STRUCT(egr_lpm6_key, EGR_FIELD(egr_lpm6_key, prefixlen),
                 EGR_FIELD(egr_lpm6_key, policy_id), EGR_FIELD(egr_lpm6_key, addr)),
      EGR_STRUCT(egr_port_range, EGR_FIELD(egr_port_range, first),
                 EGR_FIELD(egr_port_range, last)),
      EGR_STRUCT(egr_allow_val, EGR_FIELD(egr_allow_val, nranges),
                 EGR_FIELD(egr_allow_val, flags), EGR_FIELD(egr_allow_val, ranges)),
      EGR_STRUCT(egr_prot_val, EGR_FIELD(egr_prot_val, flags)),
      EGR_STRUCT(egr_resolved_key, EGR_FIELD(egr_resolved_key, sandbox_id),
                 EGR_FIELD(egr_resolved_key, addr)),
      EGR_STRUCT(egr_resolved_val, EGR_FIELD(egr_resolved_val, expires_boot_ns),
                 EGR_FIELD(egr_resolved_val, name_ids), EGR_FIELD(egr_resolved_val, keep_s),
                 EGR_FIELD(egr_resolved_val, qname_id)),
      EGR_STRUCT(egr_ifpod_val, EGR_FIELD(egr_ifpod_val, mac), EGR_FIELD(egr_ifpod_val, flags)),
      EGR_STRUCT(egr_ifaddr_key, EGR_FIELD(egr_ifaddr_key, ifindex), EGR_FIELD(egr_ifaddr_key, pad0),
                 EGR_FIELD(egr_ifaddr_key, addr)),
      EGR_STRUCT(egr_ifaddr_val, EGR_FIELD(egr_ifaddr_val, flags)),
      EGR_STRUCT(egr_tcdns_key, EGR_FIELD(egr_tcdns_key, ifindex), EGR_FIELD(egr_tcdns_key, slot)),
      EGR_STRUCT(egr_tcdns_val, EGR_FIELD(egr_tcdns_val, sandbox_id), EGR_FIELD(egr_tcdns_val, pod_addr),
                 EGR_FIELD(egr_tcdns_val, orig_addr), EGR_FIELD(egr_tcdns_val, pod_port),
                 EGR_FIELD(egr_tcdns_val, orig_port), EGR_FIELD(egr_tcdns_val, protocol),
                 EGR_FIELD(egr_tcdns_val, pad0), EGR_FIELD(egr_tcdns_val, pad1)),
      EGR_STRUCT(egr_flow_key, EGR_FIELD(egr_flow_key, sandbox_id), EGR_FIELD(egr_flow_key, pod_addr),
                 EGR_FIELD(egr_flow_key, peer_addr), EGR_FIELD(egr_flow_key, pod_port),
                 EGR_FIELD(egr_flow_key, peer_port), EGR_FIELD(egr_flow_key, proto), EGR_FIELD(egr_flow_key, pad0),
                 EGR_FIELD(egr_flow_key, pad1)),
      EGR_STRUCT(egr_flow_val, EGR_FIELD(egr_flow_val, timer), EGR_FIELD(egr_flow_val, last_ns),
                 EGR_FIELD(egr_flow_val, created_ns), EGR_FIELD(egr_flow_val, policy_id),
                 EGR_FIELD(egr_flow_val, flags), EGR_FIELD(egr_flow_val, reason), EGR_FIELD(egr_flow_val, pad0)),
      EGR_STRUCT(egr_flowcnt_val, EGR_FIELD(egr_flowcnt_val, flows), EGR_FIELD(egr_flowcnt_val, tracked),
                 EGR_FIELD(egr_flowcnt_val, refused_quota), EGR_FIELD(egr_flowcnt_val, refused_full)),
      EGR_STRUCT(egr_flowcfg_val, EGR_FIELD(egr_flowcfg_val, quota), EGR_FIELD(egr_flowcfg_val, tcp_idle_s),
                 EGR_FIELD(egr_flowcfg_val, tcp_transitory_s), EGR_FIELD(egr_flowcfg_val, udp_idle_s)),
      EGR_STRUCT(egr_resuse_val, EGR_FIELD(egr_resuse_val, last_used_ns),
                 EGR_FIELD(egr_resuse_val, socks), EGR_FIELD(egr_resuse_val, pad0)),
      EGR_STRUCT(egr_sock_val, EGR_FIELD(egr_sock_val, addr), EGR_FIELD(egr_sock_val, port),
                 EGR_FIELD(egr_sock_val, flags), EGR_FIELD(egr_sock_val, policy_id),
                 EGR_FIELD(egr_sock_val, sandbox_id), EGR_FIELD(egr_sock_val, pad0),
                 EGR_FIELD(egr_sock_val, dns_orig), EGR_FIELD(egr_sock_val, dns_orig_port),
                 EGR_FIELD(egr_sock_val, pad1), EGR_FIELD(egr_sock_val, pad2)),
      EGR_STRUCT(egr_dns_val, EGR_FIELD(egr_dns_val, addr6), EGR_FIELD(egr_dns_val, addr4),
                 EGR_FIELD(egr_dns_val, port), EGR_FIELD(egr_dns_val, flags)),
      EGR_STRUCT(egr_dnsep_key, EGR_FIELD(egr_dnsep_key, addr), EGR_FIELD(egr_dnsep_key, port),
                 EGR_FIELD(egr_dnsep_key, pad0), EGR_FIELD(egr_dnsep_key, pad1)),
      EGR_STRUCT(egr_dnsep_val, EGR_FIELD(egr_dnsep_val, sandbox_id)),
      EGR_STRUCT(egr_config_val, EGR_FIELD(egr_config_val, node_netns_cookie),
                 EGR_FIELD(egr_config_val, flags), EGR_FIELD(egr_config_val, pad0)),
      EGR_STRUCT(egr_event_key, EGR_FIELD(egr_event_key, sandbox_id),
                 EGR_FIELD(egr_event_key, sock_cookie), EGR_FIELD(egr_event_key, daddr),
                 EGR_FIELD(egr_event_key, dport), EGR_FIELD(egr_event_key, kind),
                 EGR_FIELD(egr_event_key, action), EGR_FIELD(egr_event_key, reason),
                 EGR_FIELD(egr_event_key, family), EGR_FIELD(egr_event_key, protocol),
                 EGR_FIELD(egr_event_key, pad0), EGR_FIELD(egr_event_key, epoch),
                 EGR_FIELD(egr_event_key, ifindex)),
      EGR_STRUCT(egr_event_task, EGR_FIELD(egr_event_task, cgroup_id),
                 EGR_FIELD(egr_event_task, tgid), EGR_FIELD(egr_event_task, pid),
                 EGR_FIELD(egr_event_task, uid), EGR_FIELD(egr_event_task, gid),
                 EGR_FIELD(egr_event_task, comm)),
      EGR_STRUCT(egr_event, EGR_FIELD(egr_event, key), EGR_FIELD(egr_event, task),
                 EGR_FIELD(egr_event, boot_ns), EGR_FIELD(egr_event, seq),
                 EGR_FIELD(egr_event, cpu), EGR_FIELD(egr_event, flags),
                 EGR_FIELD(egr_event, match_plen), EGR_FIELD(egr_event, match_flags),
                 EGR_FIELD(egr_event, match_id),
                 EGR_FIELD(egr_event, pad1)),
      EGR_STRUCT(egr_fold_val, EGR_FIELD(egr_fold_val, task),
                 EGR_FIELD(egr_fold_val, first_boot_ns), EGR_FIELD(egr_fold_val, count),
                 EGR_FIELD(egr_fold_val, flags), EGR_FIELD(egr_fold_val, match_plen),
                 EGR_FIELD(egr_fold_val, match_flags),
                 EGR_FIELD(egr_fold_val, match_id)),
      EGR_STRUCT(egr_loss_key, EGR_FIELD(egr_loss_key, sandbox_id),
                 EGR_FIELD(egr_loss_key, epoch), EGR_FIELD(egr_loss_key, pad0)),
      EGR_STRUCT(egr_loss_val, EGR_FIELD(egr_loss_val, lost)),
      EGR_STRUCT(egr_budget_val, EGR_FIELD(egr_budget_val, tat_boot_ns)),
      EGR_STRUCT(egr_tc_quote, EGR_FIELD(egr_tc_quote, b)),
      EGR_STRUCT(egr_auditctl_val, EGR_FIELD(egr_auditctl_val, epoch),
                 EGR_FIELD(egr_auditctl_val, flags)),
  };
  return structs;
}

struct AbiMap {
  std::string name;
  uint32_t type;
  size_t key_size;
  size_t value_size;
  uint32_t max_entries;
  std::string key_type;
  std::string value_type;
};

#define EGR_MAP(name, type, key, value, max) \
  AbiMap{name, type, sizeof(key), sizeof(value), max, #key, #value}

const std::vector<AbiMap>& AbiMaps() {
  static const std::vector<AbiMap> maps = {
      EGR_MAP(EGR_MAP_CGROUPS, BPF_MAP_TYPE_HASH, __u64, struct egr_cgroup_val, EGR_MAX_CGROUPS),
      EGR_MAP(EGR_MAP_POLICY, BPF_MAP_TYPE_HASH, __u32, struct egr_policy_val, EGR_MAX_POLICIES),
      EGR_MAP(EGR_MAP_ALLOW4, BPF_MAP_TYPE_LPM_TRIE, struct egr_lpm4_key, struct egr_allow_val,
              EGR_MAX_ALLOW4),
      EGR_MAP(EGR_MAP_ALLOW6, BPF_MAP_TYPE_LPM_TRIE, struct egr_lpm6_key, struct egr_allow_val,
              EGR_MAX_ALLOW6),
      EGR_MAP(EGR_MAP_PROT4, BPF_MAP_TYPE_LPM_TRIE, struct egr_lpm4_key, struct egr_prot_val,
              EGR_MAX_PROT),
      EGR_MAP(EGR_MAP_PROT6, BPF_MAP_TYPE_LPM_TRIE, struct egr_lpm6_key, struct egr_prot_val,
              EGR_MAX_PROT),
      EGR_MAP(EGR_MAP_RESOLVED, BPF_MAP_TYPE_HASH, struct egr_resolved_key,
              struct egr_resolved_val, EGR_MAX_RESOLVED),
      EGR_MAP(EGR_MAP_RESUSE, BPF_MAP_TYPE_HASH, struct egr_resolved_key,
              struct egr_resuse_val, EGR_MAX_RESOLVED),
      EGR_MAP(EGR_MAP_SOCK, BPF_MAP_TYPE_SK_STORAGE, int, struct egr_sock_val, 0),
      EGR_MAP(EGR_MAP_CONFIG, BPF_MAP_TYPE_ARRAY, __u32, struct egr_config_val, 1),
      EGR_MAP(EGR_MAP_STATS, BPF_MAP_TYPE_PERCPU_ARRAY, __u32, __u64, EGR_STAT_MAX),
      EGR_MAP(EGR_MAP_DNS, BPF_MAP_TYPE_HASH, __u64, struct egr_dns_val, EGR_MAX_DNS_ENDPOINTS),
      EGR_MAP(EGR_MAP_DNSEP, BPF_MAP_TYPE_HASH, struct egr_dnsep_key, struct egr_dnsep_val,
              EGR_MAX_DNS_ENDPOINTS),
      // A ring buffer has neither key nor value: its size is max_entries.
      AbiMap{EGR_MAP_EVENTS, BPF_MAP_TYPE_RINGBUF, 0, 0, EGR_EVENT_RING_BYTES, "", ""},
      EGR_MAP(EGR_MAP_FOLD, BPF_MAP_TYPE_HASH, struct egr_event_key, struct egr_fold_val,
              EGR_MAX_FOLDS),
      EGR_MAP(EGR_MAP_LOSS, BPF_MAP_TYPE_HASH, struct egr_loss_key, struct egr_loss_val,
              EGR_MAX_LOSS),
      EGR_MAP(EGR_MAP_BUDGET, BPF_MAP_TYPE_HASH, __u64, struct egr_budget_val, EGR_MAX_CGROUPS),
      EGR_MAP(EGR_MAP_AUDITCTL, BPF_MAP_TYPE_ARRAY, __u32, struct egr_auditctl_val, 1),
      EGR_MAP(EGR_MAP_AUDITSEQ, BPF_MAP_TYPE_PERCPU_ARRAY, __u32, __u64, 1),
      // A map of maps holds map fds (4 bytes); its inner array is a template.
      AbiMap{EGR_MAP_RCUSYNC, BPF_MAP_TYPE_ARRAY_OF_MAPS, 4, 4, 1, "__u32", ""},
      EGR_MAP(EGR_MAP_IFSANDBOX, BPF_MAP_TYPE_HASH, __u32, struct egr_cgroup_val, EGR_MAX_IFSANDBOXES),
      EGR_MAP(EGR_MAP_TCSTATS, BPF_MAP_TYPE_PERCPU_ARRAY, __u32, __u64, EGR_TC_STAT_MAX),
      EGR_MAP(EGR_MAP_IFPOD, BPF_MAP_TYPE_HASH, __u32, struct egr_ifpod_val, EGR_MAX_IFSANDBOXES),
      EGR_MAP(EGR_MAP_IFADDR, BPF_MAP_TYPE_HASH, struct egr_ifaddr_key, struct egr_ifaddr_val, EGR_MAX_IFADDRS),
      EGR_MAP(EGR_MAP_TCDNS, BPF_MAP_TYPE_HASH, struct egr_tcdns_key, struct egr_tcdns_val, EGR_MAX_TCDNS),
      EGR_MAP(EGR_MAP_TCFLOW, BPF_MAP_TYPE_HASH, struct egr_flow_key, struct egr_flow_val, EGR_MAX_FLOWS),
      EGR_MAP(EGR_MAP_FLOWCNT, BPF_MAP_TYPE_HASH, __u64, struct egr_flowcnt_val, EGR_MAX_IFSANDBOXES),
      EGR_MAP(EGR_MAP_FLOWCFG, BPF_MAP_TYPE_ARRAY, __u32, struct egr_flowcfg_val, 1),
      EGR_MAP(EGR_MAP_TCREJECT, BPF_MAP_TYPE_LRU_HASH, __u64, struct egr_budget_val, EGR_MAX_IFSANDBOXES),
      EGR_MAP(EGR_MAP_TCQUOTE, BPF_MAP_TYPE_PERCPU_ARRAY, __u32, struct egr_tc_quote, 1),
  };
  return maps;
}

// Every difference between the BTF layout and the C++ one, as readable lines.
std::vector<std::string> Differences(const StructLayout& btf, const AbiStruct& cxx) {
  std::vector<std::string> diffs;
  auto where = [&](const std::string& what) { return "struct " + cxx.name + " " + what; };
  if (btf.size != cxx.size) {
    diffs.push_back(where("size: BPF " + std::to_string(btf.size) + ", C++ " +
                          std::to_string(cxx.size)));
  }
  for (size_t i = 0; i < std::max(btf.members.size(), cxx.fields.size()); ++i) {
    if (i >= btf.members.size()) {
      diffs.push_back(where("member " + cxx.fields[i].name + ": missing on the BPF side"));
      continue;
    }
    const MemberLayout& b = btf.members[i];
    if (i >= cxx.fields.size()) {
      diffs.push_back(where("member " + b.name + ": on the BPF side only (check it here)"));
      continue;
    }
    const Field& c = cxx.fields[i];
    if (b.name != c.name) {
      diffs.push_back(where("member #" + std::to_string(i) + ": BPF " + b.name + ", C++ " +
                            c.name));
      continue;
    }
    if (b.offset != c.offset) {
      diffs.push_back(where(c.name + " offset: BPF " + std::to_string(b.offset) + ", C++ " +
                            std::to_string(c.offset)));
    }
    if (b.size != c.size) {
      diffs.push_back(where(c.name + " size: BPF " + std::to_string(b.size) + ", C++ " +
                            std::to_string(c.size)));
    }
  }
  return diffs;
}

std::vector<std::string> StructNames() {
  std::vector<std::string> names;
  for (const AbiStruct& s : CxxLayouts()) names.push_back(s.name);
  return names;
}

const ObjectLayout& Object() {
  static const ObjectLayout* layout = [] {
    auto l = ReadObjectLayout(EGR_BPF_OBJECT, StructNames());
    if (!l.ok()) {
      ADD_FAILURE() << l.status();
      return new ObjectLayout();
    }
    return new ObjectLayout(*std::move(l));
  }();
  return *layout;
}

// A struct added to the ABI header must be added to CxxLayouts() too.
TEST(AbiBtf, EveryAbiHeaderStructIsChecked) {
  std::ifstream in(EGR_ABI_HEADER);
  ASSERT_TRUE(in) << EGR_ABI_HEADER;
  std::stringstream text;
  text << in.rdbuf();
  const std::string src = text.str();
  std::set<std::string> declared;
  const std::regex def(R"(^struct\s+(\w+)\s*\{)", std::regex::multiline);
  for (std::sregex_iterator it(src.begin(), src.end(), def), end; it != end; ++it) {
    declared.insert((*it)[1]);
  }
  const std::vector<std::string> names = StructNames();
  EXPECT_EQ(declared, std::set<std::string>(names.begin(), names.end()));
}

TEST(AbiBtf, StructsMatchTheObjectsBtf) {
  const ObjectLayout& obj = Object();
  for (const AbiStruct& cxx : CxxLayouts()) {
    auto it = obj.structs.find(cxx.name);
    ASSERT_NE(it, obj.structs.end()) << cxx.name;
    for (const std::string& d : Differences(it->second, cxx)) ADD_FAILURE() << d;
  }
}

// The comparison sees more than sizes: two different 16-byte structs differ.
TEST(AbiBtf, ComparisonCatchesADifferentLayoutOfTheSameSize) {
  const ObjectLayout& obj = Object();
  auto policy = obj.structs.find("egr_policy_val");
  ASSERT_NE(policy, obj.structs.end());
  const AbiStruct* cgroup = nullptr;
  for (const AbiStruct& s : CxxLayouts()) {
    if (s.name == "egr_cgroup_val") cgroup = &s;
  }
  ASSERT_NE(cgroup, nullptr);
  ASSERT_EQ(policy->second.size, cgroup->size);
  EXPECT_FALSE(Differences(policy->second, *cgroup).empty());

  StructLayout moved = obj.structs.at("egr_sock_val");
  moved.members.back().offset += 4;
  const AbiStruct* sock = nullptr;
  for (const AbiStruct& s : CxxLayouts()) {
    if (s.name == "egr_sock_val") sock = &s;
  }
  ASSERT_NE(sock, nullptr);
  EXPECT_EQ(Differences(moved, *sock),
            std::vector<std::string>{"struct egr_sock_val pad2 offset: BPF 64, C++ 60"});
}

TEST(AbiBtf, MapsHoldTheAbiStructs) {
  const ObjectLayout& obj = Object();
  std::set<std::string> declared, expected;
  for (const MapLayout& m : obj.maps) declared.insert(m.name);
  for (const AbiMap& m : AbiMaps()) expected.insert(m.name);
  EXPECT_EQ(declared, expected) << "maps of " << EGR_BPF_OBJECT;

  for (const AbiMap& want : AbiMaps()) {
    const MapLayout* got = nullptr;
    for (const MapLayout& m : obj.maps) {
      if (m.name == want.name) got = &m;
    }
    if (!got) continue;  // reported above
    SCOPED_TRACE(want.name);
    EXPECT_EQ(got->type, want.type);
    EXPECT_EQ(got->key_size, want.key_size);
    EXPECT_EQ(got->value_size, want.value_size);
    EXPECT_EQ(got->max_entries, want.max_entries);
    // Same size is not enough: egr_cgroup_val and egr_policy_val are both 16.
    EXPECT_EQ(got->key_type, want.key_type);
    EXPECT_EQ(got->value_type, want.value_type);
  }
}

TEST(AbiBtf, MissingObjectIsANamedError) {
  auto l = ReadObjectLayout("/nonexistent/egressd.bpf.o", StructNames());
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("/nonexistent/egressd.bpf.o"), absl::string_view::npos)
      << l.status();
}

TEST(AbiBtf, MissingStructIsANamedError) {
  auto l = ReadObjectLayout(EGR_BPF_OBJECT, {"egr_no_such_struct"});
  ASSERT_FALSE(l.ok());
  EXPECT_TRUE(absl::IsNotFound(l.status())) << l.status();
  EXPECT_NE(l.status().message().find("egr_no_such_struct"), absl::string_view::npos);
}

}  // namespace
}  // namespace egressd::maps
