/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * The one ABI shared by the BPF programs (bpf/) and the C++ control plane.
 * Every struct here is laid out with fixed-width types and explicit padding;
 * tests/unit/abi_layout_test.cc pins the sizes and offsets, and
 * tests/unit/abi_btf_test.cc checks them against the BTF of the built object
 * (what the programs were compiled with).  Any layout change
 * bumps EGR_ABI_VERSION and the _vN suffix of every map whose layout changed,
 * so an old pinned map is never reused with a new layout.
 *
 * Byte order: addresses are stored in network order (as on the wire); ports in
 * port ranges are stored in host order (compared after bpf_ntohs).
 */
#ifndef EGRESSD_MAPS_EGRESSD_ABI_H
#define EGRESSD_MAPS_EGRESSD_ABI_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#include <linux/bpf.h> /* struct bpf_timer (egr_flow_val) */
#endif

#define EGR_ABI_VERSION 2

/* Map names (BPF object names are at most 15 characters). */
#define EGR_MAP_CGROUPS "egr_cgroups_v1"
#define EGR_MAP_POLICY "egr_policy_v1"
#define EGR_MAP_ALLOW4 "egr_allow4_v1"
#define EGR_MAP_ALLOW6 "egr_allow6_v1"
#define EGR_MAP_PROT4 "egr_prot4_v1"
#define EGR_MAP_PROT6 "egr_prot6_v1"
#define EGR_MAP_RESOLVED "egr_resolved_v2"
#define EGR_MAP_RESUSE "egr_resuse_v1"
#define EGR_MAP_SOCK "egr_sock_v2"
#define EGR_MAP_CONFIG "egr_config_v1"
#define EGR_MAP_STATS "egr_stats_v3"
#define EGR_MAP_DNS "egr_dns_v1"
#define EGR_MAP_DNSEP "egr_dnsep_v1"

/* Capacities.  LPM tries and hashes are allocated on demand (no prealloc). */
#define EGR_MAX_CGROUPS 65536
#define EGR_MAX_POLICIES 65536
#define EGR_MAX_ALLOW4 (1u << 20)
#define EGR_MAX_ALLOW6 (1u << 18)
#define EGR_MAX_PROT 16384
#define EGR_MAX_RESOLVED (1u << 20)

/* Deepest cgroup level the sandbox lookup walks (level 0 is the root). */
#define EGR_MAX_CGROUP_DEPTH 24

/* ---- egr_cgroups_v1: cgroup id -> what egressd knows of that cgroup ----
 * Sandbox ids: a sandbox registered with a cgroup is named by its cgroup id; one
 * registered by interface alone (issue 17) by 2^63 + its host-side ifindex
 * (maps/if_sandbox_table.h, InterfaceSandboxId: user space only), a range no
 * cgroup id reaches.  Its entry here holds its policy reference; no cgroup hook
 * ever looks that key up. */
enum egr_cgroup_kind {
	EGR_CG_SANDBOX = 1,        /* a registered sandbox, judged by policy_id */
	EGR_CG_CONTAINED_ROOT = 2, /* unregistered descendants get no egress */
};

struct egr_cgroup_val {
	__u32 kind;      /* enum egr_cgroup_kind */
	__u32 policy_id; /* EGR_CG_SANDBOX: the policy in force */
	__u64 sandbox_id; /* id that keys per-sandbox state (resolved names) */
};

/* ---- egr_policy_v1: policy id -> header of one compiled policy ---- */
enum egr_verdict {
	EGR_VERDICT_DENY = 0,
	EGR_VERDICT_ALLOW = 1,
};

enum egr_deny_action {
	EGR_ACTION_REJECT = 0, /* connect()/sendmsg() fail at once with EPERM */
	EGR_ACTION_DROP = 1,   /* packets vanish; the caller sees success/timeout */
};

/* egr_policy_val.flags (a reserved 0 before issue 13, so a policy written
 * by an older control plane reads as enforced and not strict).  Set per
 * sandbox by the operator, never by a declaration; part of the policy's
 * content hash, so an audit-only or strict sandbox never shares an enforced
 * one's policy (docs/audit.md). */
enum egr_policy_flags {
	/* A denial of the policy's own (nothing it allows matched: default-deny)
	 * is recorded as would-deny and passed.  Protected ranges, contained
	 * roots, DNS bypass, socket families and the backstop's structural
	 * refusals stay denied (bpf/lib/audit_mode.h). */
	EGR_POLICY_AUDIT_ONLY = 1 << 0,
	/* A connect() or send whose audit event can be neither recorded nor
	 * folded (it would be counted as lost) is refused
	 * (EGR_REASON_AUDIT_UNRECORDED, EGR_STAT_STRICT_DENY). */
	EGR_POLICY_STRICT_AUDIT = 1 << 1,
};

struct egr_policy_val {
	__u8 default_verdict; /* enum egr_verdict */
	__u8 deny_action;     /* enum egr_deny_action */
	__u8 flags;           /* enum egr_policy_flags */
	__u8 pad0;
	__u32 refcount;       /* control plane only: sandboxes pointing here */
	__u64 content_hash;   /* control plane only: identical policies share */
};

/* ---- LPM tries: (policy id, prefix) -> entry ----
 * prefixlen counts the 32 bits of policy_id, so one trie serves every policy
 * and a lookup can never match another policy's entry. */
struct egr_lpm4_key {
	__u32 prefixlen; /* 32 + CIDR prefix length */
	__u32 policy_id; /* network order, so it is the leading prefix bits */
	__u8 addr[4];
};

struct egr_lpm6_key {
	__u32 prefixlen; /* 32 + CIDR prefix length */
	__u32 policy_id; /* network order */
	__u8 addr[16];
};

#define EGR_MAX_PORT_RANGES 8

struct egr_port_range {
	__u16 first; /* host order, inclusive */
	__u16 last;  /* host order, inclusive */
};

/* egr_allow_val.flags and egr_prot_val.flags (reserved 0s before issue 13,
 * layout kept): an LPM lookup returns the value, never the key that matched,
 * so the control plane writes each entry's own CIDR prefix length into its
 * value, for the audit record to name the CIDR (`match.cidr`).  Bits 0-7:
 * the length (0-32 in the v4 tries, 0-128 in the v6 ones); EGR_LPM_PLEN_SET:
 * it is there (an entry an older control plane wrote names no CIDR).  Other
 * bits reserved, 0. */
#define EGR_LPM_PLEN_MASK 0xffu
#define EGR_LPM_PLEN_SET (1u << 8)

/* An allowed prefix.  nranges == 0 allows every port; otherwise only the
 * listed ranges (the control plane folds covering entries' ports into a more
 * specific entry, because an LPM lookup sees only the longest match). */
struct egr_allow_val {
	__u32 nranges;
	__u32 flags; /* EGR_LPM_PLEN_SET | prefix length */
	struct egr_port_range ranges[EGR_MAX_PORT_RANGES];
};

/* A protected prefix: denied whatever else the policy says. */
struct egr_prot_val {
	__u32 flags; /* EGR_LPM_PLEN_SET | prefix length */
};

/* ---- egr_resolved_v2: (sandbox, address) -> allowed until expiry ----
 * Filled by the DNS proxy with the answers to names the policy allows.
 * v2 (v1 held one name id): the rules that allowed the address, so a policy
 * change keeps the addresses of names the new policy still allows and drops
 * the others (docs/dns.md "Policy changes").  Written only by userspace:
 * what the kernel counts lives in egr_resuse_v1, so a proxy's
 * read-modify-write of an entry never loses a kernel update. */
#define EGR_RESOLVED_NAMES 4

struct egr_resolved_key {
	__u64 sandbox_id;
	__u8 addr[16]; /* IPv4 as ::ffff:a.b.c.d */
};

struct egr_resolved_val {
	__u64 expires_boot_ns; /* bpf_ktime_get_boot_ns() deadline for new flows */
	/* NameId() of the rules that allowed it, most recent first, 0 = free
	 * slot.  A fifth name pushes out the oldest: a change removing only
	 * the names kept here drops the address, which fails closed (the next
	 * answer re-learns it). */
	__u32 name_ids[EGR_RESOLVED_NAMES];
	/* Once expired, an unconnected sender that keeps sending keeps it
	 * while its sends are at most this far apart (the lifetime's grace;
	 * egr_resuse_v1's last_used_ns); 0: expiry is final for sends too. */
	__u32 keep_s;
	/* NameId() of the question name whose answer last wrote it (0: not
	 * known).  Was pad0 (layout kept, userspace only, no program reads it):
	 * a restarted proxy books a wildcard's address under that name, so the
	 * per-(sandbox, name) cap holds across restarts (learned_book.h). */
	__u32 qname_id;
};

/* ---- egr_resuse_v1: (sandbox, address) -> how flows use it ----
 * Written by the programs only (created at the first connect or send that
 * a learned address allowed); read and deleted by the collector, which
 * keeps the learned entry of an address in use past its expiry. */
/* A busy sender's last_used_ns is written at most once per this interval,
 * so it may be this much older than the last send: every reader (the
 * programs' keep check, the collector, status) adds it to the keep, so an
 * address is kept at least keep_s after the last send, never less. */
#define EGR_USE_REFRESH_NS 1000000000ull

struct egr_resuse_val {
	__u64 last_used_ns; /* last connect/send it allowed, refreshed <= 1/s */
	__u32 socks;        /* connected sockets holding it (connect +1, release -1) */
	__u32 pad0;
};

/* Until when (boot ns) the sandbox's sends keep an address stamped at
 * last_used_ns, for a keep of keep_ns; 0 when nothing stamped it.  Every
 * reader compares it with its clock (`until > now`), never `now - stamp`: a
 * send on another CPU, or between a reader's clock and its read, stamps it
 * later than the reader's `now`, and the subtraction wraps. */
static inline __u64 egr_sends_keep_until(__u64 last_used_ns, __u64 keep_ns)
{
	return last_used_ns ? last_used_ns + keep_ns + EGR_USE_REFRESH_NS : 0;
}

/* ---- egr_sock_v2 (socket storage): what connect/sendmsg decided ---- */
enum egr_sock_flags {
	EGR_SOCK_ACTIVE = 1 << 0,        /* went through connect()/sendmsg() */
	EGR_SOCK_CONNECTED = 1 << 1,     /* addr/port were allowed at connect() */
	EGR_SOCK_FOREIGN_NETNS = 1 << 2, /* socket lives outside the node netns */
	EGR_SOCK_DNS_REDIRECTED = 1 << 3, /* a query of it was steered to the
					   * sandbox's DNS endpoint (dns_orig) */
	EGR_SOCK_HOLDS_RESOLVED = 1 << 4, /* counted in the socks of the
					   * egr_resuse_v1 entry of (sandbox_id, addr):
					   * a learned address connect() allowed */
};

struct egr_sock_val {
	__u8 addr[16];   /* connected destination, IPv4 as ::ffff:a.b.c.d */
	__u16 port;      /* network order */
	__u16 flags;     /* enum egr_sock_flags */
	__u32 policy_id; /* policy that allowed it; a flip re-judges */
	__u64 sandbox_id;
	__u64 pad0;
	/* EGR_SOCK_DNS_REDIRECTED: the address and port the sandbox asked
	 * (its resolver), which recvmsg/getpeername show in place of the
	 * endpoint's.  IPv4 as ::ffff:a.b.c.d. */
	__u8 dns_orig[16];
	__u16 dns_orig_port; /* network order */
	__u16 pad1;
	__u32 pad2;
};

/* ---- egr_config_v1 (array of 1): node-wide settings ---- */
enum egr_config_flags {
	/* The bpf LSM is not active on this node: the socket-family and
	 * abstract-unix hooks are not in force, so a sandbox that must be
	 * contained cannot be registered (control plane only). */
	EGR_CONFIG_NO_SOCKET_CONTAINMENT = 1 << 0,
};

struct egr_config_val {
	__u64 node_netns_cookie; /* netns whose loopback the policy governs */
	__u32 flags;             /* enum egr_config_flags */
	__u32 pad0;              /* the schema entry: kPinSchema (loader/pin_check.h) of the last committed load (0: pinned before issue 15); the loader refuses a greater one (a downgrade) and checks every pin's shape before reuse (a field of this map, not a map of its own, because egr_config_v1 exists in every layout since the first; the layout is kept) */
};

/* ---- egr_dns_v1: sandbox id -> the DNS proxy endpoint its queries go to ----
 * Every query a sandbox sends to port 53 (any address) is steered here by the
 * sock_addr programs before any address check.  Each sandbox has an endpoint
 * of its own (a port, and an address the sandbox's netns routes to egressd),
 * so the proxy knows the sandbox from the socket a query arrived on: the
 * binding is made by the kernel, never read from anything the sandbox chose.
 * No entry for a sandbox: its DNS is refused (fails closed). */
struct egr_dns_val {
	__u8 addr6[16]; /* IPv6 endpoint; all-zero: IPv6 queries are refused */
	__u32 addr4;    /* IPv4 endpoint, network order; 0: IPv4 queries refused */
	__u16 port;     /* network order, the same for both families */
	__u16 flags;    /* reserved, 0 */
};

/* ---- egr_dnsep_v1: endpoint -> the sandbox it serves ----
 * What the backstop and the sock_addr programs consult so that nothing reaches
 * an endpoint except through the redirect of its own sandbox (a direct
 * connect, a raw packet, another sandbox's endpoint). */
struct egr_dnsep_key {
	__u8 addr[16]; /* IPv4 as ::ffff:a.b.c.d */
	__u16 port;    /* network order */
	__u16 pad0;
	__u32 pad1;
};

struct egr_dnsep_val {
	__u64 sandbox_id; /* 0 (no sandbox has it): egressd's own endpoint, the
			   * daemon's metrics listener; 2^32 (no cgroup id has low
			   * 32 bits of 0): a DNS proxy's upstream socket
			   * (maps/dns_endpoints.h kUpstreamGuardOwner).  Every
			   * sandbox is refused both (issue 14; values the layout
			   * already had) */
};

#define EGR_MAX_DNS_ENDPOINTS EGR_MAX_CGROUPS

/* ---- The audit trail (issue 13): egr_events_v1, egr_fold_v1, egr_loss_v1,
 * egr_budget_v1, egr_auditctl_v1, egr_auditseq_v1, egr_rcusync_v1 ----
 * Every judged connect() and the first send of a socket to a destination go
 * on the ring as one struct egr_event each, while the sandbox's budget lasts.
 * Beyond the budget, and for a socket's later sends to the same destination,
 * occurrences are folded before any ring reservation: counted (atomic add) in
 * egr_fold_v1 under their struct egr_event_key.  What can be neither recorded
 * nor folded (ring or fold map full) is counted per sandbox in egr_loss_v1.
 * Both are keyed by the epoch in egr_auditctl_v1: the reader bumps it each
 * fold window, waits for every program that read the old epoch to finish (an
 * update of egr_rcusync_v1, a map of maps, waits for an RCU grace period),
 * then reads the old epoch's counts, which nothing can change any more, and
 * deletes them.  So the records' counts plus the lost counts equal what the
 * sandboxes did, exactly, and no map grows past one window of distinct keys.
 *
 * Time is bpf_ktime_get_boot_ns(); the reader adds its own realtime-boottime
 * offset (TAI from bpf_ktime_get_tai_ns is only as right as the node's TAI
 * offset, which is often never set). */
#define EGR_MAP_EVENTS "egr_events_v1"
#define EGR_MAP_FOLD "egr_fold_v1"
#define EGR_MAP_LOSS "egr_loss_v1"
#define EGR_MAP_BUDGET "egr_budget_v1"
#define EGR_MAP_AUDITCTL "egr_auditctl_v1"
#define EGR_MAP_AUDITSEQ "egr_auditseq_v1"
#define EGR_MAP_RCUSYNC "egr_rcusync_v1"

#define EGR_EVENT_RING_BYTES (8u << 20) /* ~80k records */
#define EGR_MAX_FOLDS 65536             /* distinct folded keys per window */
#define EGR_MAX_LOSS 16384              /* sandboxes losing in one window */
/* Per sandbox: records a burst may put on the ring at once, and the rate at
 * which that allowance comes back.  Beyond it occurrences are folded. */
#define EGR_AUDIT_BURST 8192
#define EGR_AUDIT_RATE_PER_S 50000

/* Why a hook decided what it did (bpf/lib/decision.h), as the audit record
 * carries it. */
enum egr_reason {
	EGR_REASON_NOT_SANDBOX = 0, /* no registered cgroup above: untouched */
	EGR_REASON_CONTAINED,       /* below a contained root, not registered */
	EGR_REASON_NO_POLICY,       /* a dangling policy id: fails closed */
	EGR_REASON_PROTECTED,       /* a protected range, whatever else allows */
	EGR_REASON_ALLOWED,         /* an allowed CIDR (and port) */
	EGR_REASON_RESOLVED,        /* an address the DNS proxy resolved */
	EGR_REASON_DEFAULT,         /* nothing matched: the policy's default */
	EGR_REASON_OWN_LOOPBACK,    /* loopback of the sandbox's own netns */
	EGR_REASON_CONNECTED,       /* a packet of a connection connect() allowed */
	EGR_REASON_INBOUND_TCP,     /* a TCP socket never connect()ed: inbound */
	EGR_REASON_NOT_IP,          /* no IP destination to judge */
	EGR_REASON_MALFORMED,       /* unparseable, too deep, or source-routed */
	EGR_REASON_ROUTING_HOP,     /* a routing-header hop is not allowed */
	EGR_REASON_FAMILY,          /* a socket family (or a send on it) not allowed */
	EGR_REASON_FOREIGN_PEER,    /* an abstract unix peer outside the sandbox */
	EGR_REASON_LOOPBACK_LEAVES, /* a loopback destination on a real link */
	EGR_REASON_UNRECORDED_OPEN, /* a TCP SYN no allowed connect() recorded */
	EGR_REASON_DNS_REDIRECT,    /* a query steered to the sandbox's endpoint */
	EGR_REASON_DNS_REFUSED,     /* a query with no endpoint, or bypassing it */
	EGR_REASON_DNS_ENDPOINT,    /* a redirected socket's packet to its endpoint */
	EGR_REASON_AUDIT_UNRECORDED, /* strict sandbox: its event could not be recorded */
	/* Appended for the tc program (issue 17; values only, no layout): */
	EGR_REASON_LINK_LOCAL,      /* ARP or IPv6 neighbour discovery on the pod's link */
	EGR_REASON_FRAME,           /* a frame that is neither IP nor ARP, or an IPv6
				     * router advertisement or redirect from a pod */
	EGR_REASON_SPOOFED,         /* a source MAC or address that is not the pod's */
	/* Appended for the tc flow table (issue 17, egr_tcflow_v1): */
	EGR_REASON_FLOW,            /* a packet of a flow the table holds (an inbound TCP
				     * connection, or a flow a learned name allowed at its
				     * first packet) that the policy alone would refuse */
	EGR_REASON_FLOW_UNTRACKED,  /* a flow the table could not hold (quota or map full):
				     * judged per packet */
};

enum egr_event_kind {
	EGR_EVENT_CONNECT = 1,  /* a connect() judged */
	EGR_EVENT_SEND = 2,     /* an unconnected send judged */
	EGR_EVENT_BACKSTOP = 3, /* a packet the backstop dropped */
	EGR_EVENT_TC = 4,       /* a packet judged at a sandbox's veth (issue 17):
				 * every denial and would-deny, and a strict
				 * sandbox's passes; key.ifindex names the veth */
	/* 16 and above are user-space sources (the DNS proxy's queries,
	 * lifecycle); they never travel on the ring. */
	EGR_EVENT_USER_FIRST = 16,
};

enum egr_event_flags {
	EGR_EVENT_HAS_TASK = 1 << 0, /* tgid/pid/comm are the caller's (not softirq) */
	EGR_EVENT_HAS_UID = 1 << 1,  /* uid/gid are known */
};

/* egr_event.match_flags: what match_id and match_plen say. */
enum egr_match_flags {
	/* match_plen is the prefix length of the allowed or protected CIDR that
	 * matched the destination (an IPv4 or IPv4-mapped destination: of its
	 * IPv4 address) */
	EGR_MATCH_CIDR = 1 << 0,
	/* ... and the CIDR is over the IPv4 address in match_id (network
	 * order), an IPv4 form embedded in the IPv6 destination (lib/addr.h) */
	EGR_MATCH_CIDR_EMBEDDED_V4 = 1 << 1,
};

/* What makes two occurrences identical: the fold key, and the head of a
 * record. */
struct egr_event_key {
	__u64 sandbox_id;
	__u64 sock_cookie; /* sends: the socket; 0 for others and once folded */
	__u8 daddr[16];    /* IPv4 as ::ffff:a.b.c.d */
	__u16 dport;       /* host order; 0: none */
	__u8 kind;         /* enum egr_event_kind */
	__u8 action;       /* 0 pass, 1 deny (reject), 2 deny (drop), 3 would-deny
			    * (passed: an audit-only sandbox, bpf/lib/decision.h) */
	__u8 reason;       /* the decision's reason (bpf/lib/decision.h) */
	__u8 family;       /* AF_INET or AF_INET6, as the caller named it */
	__u8 protocol;     /* IPPROTO_* */
	__u8 pad0;
	__u32 epoch;       /* egr_auditctl_v1's epoch when it happened */
	/* EGR_EVENT_TC: the host-side interface (node netns ifindex) the packet
	 * came in on; 0 for every other kind.  Was pad1, always written 0, so
	 * the layout is kept and an older record reads as "no interface". */
	__u32 ifindex;
};

/* Who did it (the first occurrence of a folded key). */
struct egr_event_task {
	__u64 cgroup_id; /* the caller's own cgroup (the sandbox's or below) */
	__u32 tgid;      /* node pid namespace */
	__u32 pid;       /* thread id, node pid namespace */
	__u32 uid;
	__u32 gid;
	char comm[16];
};

struct egr_event {
	struct egr_event_key key;
	struct egr_event_task task;
	__u64 boot_ns;  /* bpf_ktime_get_boot_ns() */
	__u64 seq;      /* per CPU, from 1: a reader sees gaps per CPU */
	__u32 cpu;
	__u16 flags;    /* enum egr_event_flags */
	__u8 match_plen;  /* EGR_MATCH_CIDR: the matched CIDR's prefix length */
	__u8 match_flags; /* enum egr_match_flags (was a reserved u16 pad: layout kept) */
	/* reason resolved: the newest name id egr_resolved_v2 holds;
	 * EGR_MATCH_CIDR_EMBEDDED_V4: the IPv4 address the CIDR matched */
	__u32 match_id;
	__u32 pad1;
};

struct egr_fold_val {
	struct egr_event_task task; /* who folded first */
	__u64 first_boot_ns;
	__u64 count;    /* occurrences, atomic adds */
	__u16 flags;    /* enum egr_event_flags */
	__u8 match_plen;  /* as in struct egr_event (was a reserved u16 pad) */
	__u8 match_flags;
	__u32 match_id;
};

struct egr_loss_key {
	__u64 sandbox_id;
	__u32 epoch;
	__u32 pad0;
};

struct egr_loss_val {
	__u64 lost; /* occurrences neither recorded nor folded, atomic adds */
};

/* Token bucket as a theoretical arrival time (GCRA): an occurrence may go on
 * the ring when tat - now stays within the burst. */
struct egr_budget_val {
	__u64 tat_boot_ns;
};

struct egr_auditctl_val {
	__u32 epoch; /* written by the reader only */
	__u32 flags; /* reserved, 0 */
};

/* ---- egr_stats_v3 (per-CPU array): decision counters ----
 * v3: would_deny and strict_deny appended (v2 had 14 entries; a pinned map
 * is reused only with the same max_entries, so the name moves on). */
enum egr_stat {
	EGR_STAT_CONNECT_ALLOW = 0,
	EGR_STAT_CONNECT_DENY,
	EGR_STAT_SENDMSG_ALLOW,
	EGR_STAT_SENDMSG_DENY,
	EGR_STAT_SKB_PASS,
	EGR_STAT_SKB_DROP,
	EGR_STAT_CONTAINED_DENY,
	EGR_STAT_LSM_DENY,        /* socket family / packet send / unix peer refused */
	EGR_STAT_SOCKOPT_DENY,    /* multicast join or SO_BROADCAST refused */
	EGR_STAT_DNS_REDIRECT,    /* a query steered to the sandbox's endpoint */
	EGR_STAT_DNS_DENY,        /* a query refused: no endpoint, or bypassing it */
	EGR_STAT_EVENT_SUBMITTED, /* audit: records put on the ring */
	EGR_STAT_EVENT_FOLDED,    /* audit: occurrences folded into a later record */
	EGR_STAT_EVENT_LOST,      /* audit: occurrences neither recorded nor folded */
	EGR_STAT_WOULD_DENY,      /* audit-only: denials recorded as would-deny and passed */
	EGR_STAT_STRICT_DENY,     /* strict: connects/sends refused, their event unrecordable */
	EGR_STAT_MAX,
};

/* ---- egr_ifsbox_v1: interface -> the sandbox behind it (issue 17) ----
 * A sandbox registered by interface (gVisor, a VM: its sockets never reach
 * the node's cgroup hooks) is judged at its host-side veth by the tc program
 * on that interface's ingress (the pod's egress).  Key: the host-side
 * interface's ifindex in the node netns (__u32).  Value: the same struct
 * egr_cgroup_val as egr_cgroups_v1 (policy and sandbox id of the sandbox's
 * registration), written with it and flipped with it, so one sandbox has one
 * policy whichever hook judges it.  A new map, no layout change: the ABI
 * version stays 2. */
#define EGR_MAP_IFSANDBOX "egr_ifsbox_v1"
#define EGR_MAX_IFSANDBOXES EGR_MAX_CGROUPS

/* ---- egr_tcstats_v2 (per-CPU array): the tc program's counters ----
 * v2: 16 slots (v1 had 8, of which 5 were used; loader/migrations/
 * tcstats_v1.cc carries them).  Its own map: egr_stats_v3's size is fixed by its pinned max_entries. */
enum egr_tc_stat {
	EGR_TC_STAT_PASS = 0,     /* a frame of a registered interface passed */
	EGR_TC_STAT_DROP,         /* dropped by the policy (or malformed) */
	EGR_TC_STAT_FRAME_DROP,   /* not IP nor ARP, an RA or redirect: dropped */
	EGR_TC_STAT_LINK_LOCAL,   /* ARP / neighbour discovery passed */
	EGR_TC_STAT_SPOOFED,      /* a source MAC or address not the pod's: dropped */
	EGR_TC_STAT_DNS_UNMATCHED, /* egress: a packet from the sandbox's DNS endpoint to
				    * the pod that no steered query explains: dropped */
	EGR_TC_STAT_FLOW_PASS,    /* passed by egr_tcflow_v1 where the policy alone refuses */
	EGR_TC_STAT_FLOW_UNTRACKED, /* a flow not tracked (quota or map full): per packet */
	/* onDeny reject (bpf/lib/tc_reject.h); each is also a DROP above: */
	EGR_TC_STAT_REJECT_RST,   /* a denied TCP segment answered with a RST */
	EGR_TC_STAT_REJECT_ICMP,  /* another denied packet answered with ICMP(v6) */
	EGR_TC_STAT_REJECT_LIMITED, /* no answer: past the sandbox's reply bucket */
	EGR_TC_STAT_MAX = 16,     /* the map's size: room to append without a new map */
};
#define EGR_MAP_TCSTATS "egr_tcstats_v2"

/* ---- egr_tcrej_v1 (LRU hash): sandbox id -> its reply bucket ----
 * onDeny reject at tc answers denied packets (a RST, ICMP admin-prohibited)
 * at most EGR_TC_REJECT_BURST at once and EGR_TC_REJECT_RATE_PER_S on
 * average per sandbox (a GCRA, struct egr_budget_val as the audit budget's);
 * past it the packet is dropped unanswered (EGR_TC_STAT_REJECT_LIMITED), so a
 * flood of denied packets never becomes a flood of replies.  LRU: a gone
 * sandbox's bucket ages out, and a recreated one starts full. */
#define EGR_MAP_TCREJECT "egr_tcrej_v1"
/* egr_tcquote_v1 (per-CPU array of one, unpinned): scratch where an ICMP
 * error's quote is built (off the stack: the verifier's 512 bytes). */
#define EGR_MAP_TCQUOTE "egr_tcquote_v1"
#define EGR_TC_REJECT_BURST 20
#define EGR_TC_REJECT_RATE_PER_S 100
/* Bytes of a denied packet an ICMP(v6) error quotes, from its IP header on
 * (fewer when the packet is shorter); a multiple of 4. */
#define EGR_TC_REJECT_QUOTE 128

struct egr_tc_quote {
	__u8 b[EGR_TC_REJECT_QUOTE];
};
#if defined(__cplusplus)
static_assert(sizeof(struct egr_tc_quote) == EGR_TC_REJECT_QUOTE, "egr_tc_quote layout");
#else
_Static_assert(sizeof(struct egr_tc_quote) == EGR_TC_REJECT_QUOTE, "egr_tc_quote layout");
#endif

/* ---- egr_ifpod_v1, egr_ifaddr_v1: who the pod behind an interface is ----
 * Anti-spoofing at the veth: when an interface has an egr_ifpod_v1 entry,
 * every frame it sends must carry the pod's own source MAC (when known) and
 * every IP packet, ARP sender and neighbour advertisement target one of the
 * pod's own addresses (egr_ifaddr_v1: the node's host routes through the
 * interface, as a CNI sets them up), or for IPv6 a link-local or the
 * unspecified source (neighbour discovery).  No entry: not checked. */
#define EGR_MAP_IFPOD "egr_ifpod_v1"
#define EGR_MAP_IFADDR "egr_ifaddr_v1"
#define EGR_MAX_IFADDRS (4 * EGR_MAX_IFSANDBOXES)

enum egr_ifpod_flags {
	EGR_IFPOD_MAC = 1 << 0, /* mac is the pod's: other source MACs are dropped */
};

struct egr_ifpod_val {
	__u8 mac[6];
	__u16 flags; /* enum egr_ifpod_flags */
};

struct egr_ifaddr_key {
	__u32 ifindex;
	__u32 pad0;
	__u8 addr[16]; /* IPv4 as ::ffff:a.b.c.d */
};

struct egr_ifaddr_val {
	__u32 flags; /* reserved, 0 */
};

/* ---- egr_tcdns_v1: which resolver a pod behind an interface asked ----
 * DNS steering at the veth (bpf/lib/tc_dns.h): the tc ingress program
 * rewrites every DNS packet of the pod (UDP and TCP, port 53, any address)
 * to the sandbox's endpoint and notes here what it asked; the tc egress
 * program finds the note again from the answer (the pod's port) and puts
 * the resolver's address and port back as the answer's source.
 * Key: the host-side ifindex and a slot, a hash of (family, protocol, pod
 * port) modulo EGR_TCDNS_SLOTS.  Each interface owns its slots and a query
 * overwrites only a slot of its own interface, so the table is bounded per
 * sandbox and one sandbox never evicts another's notes.  A slot taken by a
 * later query of the same pod (a collision) leaves the earlier one's answer
 * unmatched: dropped, and the client retries (fails closed).  The value
 * names the sandbox and the pod's source, checked on the way back, so a
 * stale note (an ifindex reused after its pod went) matches nothing.  A new
 * map, no layout change: the ABI version stays 2. */
#define EGR_MAP_TCDNS "egr_tcdns_v1"
#define EGR_TCDNS_SLOTS 64
/* 4096 interfaces' worth of slots (no preallocation: memory as used).  Past
 * that a new note fails to insert and its query is refused (counted
 * dns_deny): never an eviction of another sandbox's note. */
#define EGR_MAX_TCDNS (4096 * EGR_TCDNS_SLOTS)

struct egr_tcdns_key {
	__u32 ifindex;
	__u32 slot; /* < EGR_TCDNS_SLOTS */
};

struct egr_tcdns_val {
	__u64 sandbox_id;   /* the sandbox whose query it was */
	__u8 pod_addr[16];  /* the query's source, IPv4 as ::ffff:a.b.c.d */
	__u8 orig_addr[16]; /* the address the pod asked, same form */
	__u16 pod_port;     /* network order */
	__u16 orig_port;    /* network order (53) */
	__u8 protocol;      /* IPPROTO_UDP or IPPROTO_TCP */
	__u8 pad0;
	__u16 pad1;
};

#if defined(__cplusplus)
static_assert(sizeof(struct egr_tcdns_key) == 8, "egr_tcdns_key layout");
static_assert(sizeof(struct egr_tcdns_val) == 48, "egr_tcdns_val layout");
static_assert((EGR_TCDNS_SLOTS & (EGR_TCDNS_SLOTS - 1)) == 0, "slots are a power of two");
#else
_Static_assert(sizeof(struct egr_tcdns_key) == 8, "egr_tcdns_key layout");
_Static_assert(sizeof(struct egr_tcdns_val) == 48, "egr_tcdns_val layout");
_Static_assert((EGR_TCDNS_SLOTS & (EGR_TCDNS_SLOTS - 1)) == 0, "slots are a power of two");
#endif

/* ---- egr_tcflow_v1, egr_flowcnt_v1, egr_flowcfg_v1: per-flow state at tc ----
 * (issue 17, bpf/lib/tc_flow.h).  A sandbox judged at its veth has no socket
 * whose record outlives a learned name's expiry, and no socket at all for a
 * connection a peer opened.  egr_tcflow_v1 holds, per sandbox and 5-tuple
 * (the pod's side first), the flows that need state: a TCP connection a SYN
 * into the pod opened (written only by egr_tc_egress, so a pod cannot make
 * one), and a flow whose first packet a learned name allowed (egr_tc_ingress).
 * A flow allowed by a CIDR or the default needs none: the same policy judges
 * every packet of it the same.  Before an insert the sandbox's count in
 * egr_flowcnt_v1 is checked against the quota (egr_flowcfg_v1), so one
 * sandbox's flows never take another's room; nothing is evicted.  Each entry
 * carries a bpf_timer that deletes it once idle (and decrements the count),
 * so nothing polls; a lookup treats an expired entry as gone.  A new map, no
 * layout change: the ABI version stays 2. */
#define EGR_MAP_TCFLOW "egr_tcflow_v1"
#define EGR_MAP_FLOWCNT "egr_flowcnt_v1"
#define EGR_MAP_FLOWCFG "egr_flowcfg_v1"
#define EGR_MAX_FLOWS (1u << 20) /* node-wide; allocated on demand */
/* The defaults (docs/datapath.md "Flow state"; the deployment config's
 * flows: section overrides them, userspace/policy/deployment_config.h):
 * 4096 flows a sandbox lets 256 sandboxes hold their quotas within the
 * node-wide map, as the learned addresses' quota does. */
#define EGR_FLOW_DEFAULT_QUOTA 4096
#define EGR_FLOW_DEFAULT_TCP_IDLE_S 3600     /* an established connection, idle */
#define EGR_FLOW_DEFAULT_TCP_TRANSITORY_S 60 /* opening (no answer yet) or closing (a FIN) */
#define EGR_FLOW_DEFAULT_UDP_IDLE_S 120      /* UDP and other protocols, idle */

struct egr_flow_key {
	__u64 sandbox_id;
	__u8 pod_addr[16];  /* the pod's side; IPv4 as ::ffff:a.b.c.d */
	__u8 peer_addr[16];
	__u16 pod_port;     /* host order; 0 for protocols without ports */
	__u16 peer_port;
	__u8 proto;         /* IPPROTO_* */
	__u8 pad0;
	__u16 pad1;
};

enum egr_flow_flags {
	EGR_FLOW_INBOUND = 1 << 0, /* opened by a TCP SYN into the pod */
	EGR_FLOW_REPLIED = 1 << 1, /* a packet of the other direction was seen */
	EGR_FLOW_CLOSING = 1 << 2, /* a FIN was seen: the transitory timeout */
};

struct egr_flow_val {
	struct bpf_timer timer; /* kernel-owned (16 bytes): the entry's expiry */
	__u64 last_ns;          /* bpf_ktime_get_boot_ns() of its last packet */
	__u64 created_ns;
	__u32 policy_id;        /* the policy in force at its first packet: a flip ends it */
	__u8 flags;             /* enum egr_flow_flags */
	__u8 reason;            /* what let its first packet through (enum egr_reason) */
	__u16 pad0;
};

/* Per sandbox, written by the programs only (atomic adds).  flows is signed:
 * a removal racing a sandbox's re-registration may leave it one short, which
 * then errs towards room, never towards a quota that cannot be freed. */
struct egr_flowcnt_val {
	__s64 flows;          /* entries held now */
	__u64 tracked;        /* entries ever made */
	__u64 refused_quota;  /* flows not tracked: the quota was full */
	__u64 refused_full;   /* flows not tracked: the map (or a timer) failed */
};

/* Array of one, written by the control plane; a 0 field: its default. */
struct egr_flowcfg_val {
	__u32 quota;            /* flows per sandbox */
	__u32 tcp_idle_s;
	__u32 tcp_transitory_s;
	__u32 udp_idle_s;
};

#if defined(__cplusplus)
static_assert(sizeof(struct egr_flow_key) == 48, "egr_flow_key layout");
static_assert(sizeof(struct egr_flow_val) == 40, "egr_flow_val layout");
static_assert(sizeof(struct egr_flowcnt_val) == 32, "egr_flowcnt_val layout");
static_assert(sizeof(struct egr_flowcfg_val) == 16, "egr_flowcfg_val layout");
#else
_Static_assert(sizeof(struct egr_flow_key) == 48, "egr_flow_key layout");
_Static_assert(sizeof(struct egr_flow_val) == 40, "egr_flow_val layout");
_Static_assert(sizeof(struct egr_flowcnt_val) == 32, "egr_flowcnt_val layout");
_Static_assert(sizeof(struct egr_flowcfg_val) == 16, "egr_flowcfg_val layout");
#endif

#endif /* EGRESSD_MAPS_EGRESSD_ABI_H */
