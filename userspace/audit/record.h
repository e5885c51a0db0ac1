// One audit record as a JSON line (schema egressd.audit/v1, docs/audit.md):
// field names follow Hubble's flow JSON and Tetragon's process events where
// they fit (`time`, `verdict`, `IP.destination`, `l4.TCP.destination_port`,
// `process.pid`, `pod.namespace`).  Pure functions of their inputs.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

#include "maps/egressd_abi.h"
#include "userspace/control/sandbox_record.h"

namespace egressd::audit {

inline constexpr const char* kSchema = "egressd.audit/v1";

// What the sandbox record says about a sandbox (absent: no record).
struct SandboxInfo {
  control::Labels labels;
  // The policy's name rules by the id the kernel carries (dns::NameId of the
  // rule: "api.example.com", "*.example.net"), so a resolved-name record says
  // which rule put its address in the map (`match.name`).
  std::map<uint32_t, std::string> names;
  // The sandbox's own pid namespace (SandboxRecord::pidns_*); 0: not known.
  uint64_t pidns_dev = 0, pidns_inode = 0;
};
// The rules of a compiled policy by their ids.
std::map<uint32_t, std::string> NameRulesById(const policy::CompiledPolicy& policy);

// What user space adds to a kernel record when it encodes it (exporter.cc):
// the ids in the sandbox's own pid namespace (`process.ns_pid`, `ns_tid`;
// ns_pids.h), only on a record that has a task, and the names its
// destination was learned for (`destination_names`, Hubble's field; a
// resolved-name record).  Absent when not known, never zero.
struct Enrichment {
  std::optional<uint32_t> ns_pid, ns_tid;
  std::vector<std::string> destination_names;  // sorted, no duplicates
  // A tc record (key.ifindex): the interface's name in the reader's netns,
  // the node's (`interface.name`); absent when the index names none now.
  std::optional<std::string> interface_name;
};

// "allowed-cidr", "default-deny", "backstop:protected", ...
std::string ReasonName(uint8_t kind, uint8_t action, uint8_t reason);
// `match.cidr`: the allowed or protected CIDR a record's destination matched
// (the destination, or the IPv4 address embedded in it, masked to the entry's
// own prefix length the kernel carried); none without EGR_MATCH_CIDR.
std::optional<std::string> MatchCidr(const egr_event_key& k, uint8_t plen, uint8_t mflags, uint32_t match_id);
// RFC 3339 in UTC with nanoseconds ("2026-12-03T19:40:41.000000007Z").
std::string FormatTime(uint64_t realtime_ns);
// The same, appended to `out` (the line encoders').
void AppendRfc3339(std::string& out, uint64_t realtime_ns);

// A record off the ring (count 1).  realtime_ns: its time on the wall clock.
nlohmann::json EventJson(const egr_event& e, uint64_t realtime_ns,
                         const std::optional<SandboxInfo>& sandbox, const Enrichment& x = {});
// `count` more occurrences of `k` folded in the kernel during one window.
nlohmann::json SummaryJson(const egr_event_key& k, const egr_fold_val& v, uint64_t first_realtime_ns,
                           uint64_t now_realtime_ns, const std::optional<SandboxInfo>& sandbox,
                           const Enrichment& x = {});
// `lost` occurrences of a sandbox neither recorded nor folded; sandbox_id 0:
// no sandbox could be named (its loss counter could not be kept either).
nlohmann::json LossJson(uint64_t sandbox_id, uint64_t lost, uint64_t now_realtime_ns,
                        const std::optional<SandboxInfo>& sandbox);
// Kernel records cpu:first..last that this reader never received (a reader
// that died between taking them off the ring and writing them).
nlohmann::json GapJson(uint32_t cpu, uint64_t first, uint64_t last, uint64_t now_realtime_ns);

// One line: `seq` set, no newline inside.
std::string Line(nlohmann::json& record, uint64_t seq);

// egressctl audit's filters (and GET /v1/audit's: the same code) and its
// compact form.
struct Filter {
  std::optional<uint64_t> sandbox;
  std::optional<std::string> verdict;  // "allow", "deny" or "would-deny"
  std::optional<std::string> type;     // "connect", "dns", "loss", ...
  // Records whose `time` is at or after this (FormatTime's form, so the
  // strings compare as the times do).
  std::optional<std::string> since;
  bool empty() const { return !sandbox && !verdict && !type && !since; }
};
bool Matches(const nlohmann::json& record, const Filter& f);
// Parses the filters as both the command line and the API spell them
// (`sandbox` a cgroup id; `since` RFC 3339): InvalidArgument naming the
// value.  Empty strings: no filter.
absl::StatusOr<Filter> ParseFilter(const std::string& sandbox, const std::string& verdict,
                                   const std::string& type, const std::string& since);
std::string Compact(const nlohmann::json& record);

// The exporter's hot path (line_encoder.cc): the same bytes as
// Line(EventJson(...), seq) and Line(SummaryJson(...), seq), appended to a
// reusable buffer without building a JSON object.  A sandbox's part of a
// line is encoded once (EncodedSandbox) and reused for all its records.
struct EncodedSandbox {
  uint64_t id = 0;
  std::string pod;      // `"pod":{...},` or empty
  std::string run;      // `"run":"...",` or empty
  std::string sandbox;  // `"sandbox":{"id":N[,"labels":{...}]},`
  std::string task;     // `"task":"...",` or empty
  std::map<uint32_t, std::string> names;  // SandboxInfo::names
};
EncodedSandbox EncodeSandbox(uint64_t sandbox_id, const std::optional<SandboxInfo>& sandbox);
void AppendEventLine(std::string& out, const egr_event& e, uint64_t realtime_ns, const EncodedSandbox& sandbox,
                     uint64_t seq, const Enrichment& x = {});
void AppendSummaryLine(std::string& out, const egr_event_key& k, const egr_fold_val& v,
                       uint64_t first_realtime_ns, uint64_t now_realtime_ns, const EncodedSandbox& sandbox,
                       uint64_t seq, const Enrichment& x = {});
// `s` as a JSON string (quoted), escaped as nlohmann's dump() escapes it.
void AppendJsonString(std::string& out, std::string_view s);

}  // namespace egressd::audit
