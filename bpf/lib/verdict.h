/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* The policy decision for one destination, shared by every hook.
 * Order: protected ranges, then allowed entries (CIDRs, then addresses the
 * DNS proxy resolved for this sandbox), then the policy's default. */
#ifndef EGRESSD_BPF_LIB_VERDICT_H
#define EGRESSD_BPF_LIB_VERDICT_H

#include "lib/maps.h"
#include "lib/addr.h"
#include "lib/decision.h"

/* Port 0 means "no port" (ICMP, non-first fragments): it matches only an
 * entry that allows every port. */
static __always_inline int egr_ports_allow(const struct egr_allow_val *v, __u16 port)
{
	__u32 n = v->nranges;

	if (n == 0)
		return 1;
	for (__u32 i = 0; i < EGR_MAX_PORT_RANGES; i++) {
		if (i >= n)
			break;
		if (port && port >= v->ranges[i].first && port <= v->ranges[i].last)
			return 1;
	}
	return 0;
}

static __always_inline int egr_v4_protected(__u32 policy_id, __u32 ip4_be)
{
	struct egr_lpm4_key k = {
		.prefixlen = 64,
		.policy_id = bpf_htonl(policy_id),
	};

	__builtin_memcpy(k.addr, &ip4_be, 4);
	return bpf_map_lookup_elem(&egr_prot4_v1, &k) != NULL;
}

static __always_inline int egr_v4_allowed(__u32 policy_id, __u32 ip4_be, __u16 port)
{
	struct egr_lpm4_key k = {
		.prefixlen = 64,
		.policy_id = bpf_htonl(policy_id),
	};
	struct egr_allow_val *v;

	__builtin_memcpy(k.addr, &ip4_be, 4);
	v = bpf_map_lookup_elem(&egr_allow4_v1, &k);
	return v && egr_ports_allow(v, port);
}

static __always_inline int egr_v6_protected(__u32 policy_id, const struct egr_addr *a)
{
	struct egr_lpm6_key k = {
		.prefixlen = 160,
		.policy_id = bpf_htonl(policy_id),
	};

	__builtin_memcpy(k.addr, a->b, 16);
	return bpf_map_lookup_elem(&egr_prot6_v1, &k) != NULL;
}

static __always_inline int egr_v6_allowed(__u32 policy_id, const struct egr_addr *a, __u16 port)
{
	struct egr_lpm6_key k = {
		.prefixlen = 160,
		.policy_id = bpf_htonl(policy_id),
	};
	struct egr_allow_val *v;

	__builtin_memcpy(k.addr, a->b, 16);
	v = bpf_map_lookup_elem(&egr_allow6_v1, &k);
	return v && egr_ports_allow(v, port);
}

/* A v6 form of a protected IPv4 address is protected (lib/addr.h). */
static __always_inline int egr_embedded_v4_protected(__u32 policy_id, const struct egr_addr *a)
{
	__u32 v4[EGR_MAX_EMBEDDED_V4];
	int n = egr_addr_embedded_v4(a, v4);

	for (int i = 0; i < EGR_MAX_EMBEDDED_V4; i++) {
		if (i >= n)
			break;
		if (egr_v4_protected(policy_id, v4[i]))
			return 1;
	}
	return 0;
}

/* How long a learned address lets a flow through (docs/dns.md "Lifetimes"). */
enum egr_resolved_use {
	EGR_RES_NEW = 0,  /* a new connection: until its expiry */
	EGR_RES_SEND = 1, /* a send: also while the sandbox's sends to it keep it */
	EGR_RES_HELD = 2, /* a socket connected to it: while the entry exists,
			   * i.e. while the policy still allows a name that
			   * learned it (a change deletes the others) */
};

static __always_inline int egr_resolved_allowed(__u64 sandbox_id, const struct egr_addr *a, int use)
{
	struct egr_resolved_key k = { .sandbox_id = sandbox_id };
	struct egr_resolved_val *v;
	struct egr_resuse_val *u;
	__u64 now;

	__builtin_memcpy(k.addr, a->b, 16);
	v = bpf_map_lookup_elem(&egr_resolved_v2, &k);
	if (!v)
		return 0;
	if (use == EGR_RES_HELD)
		return 1;
	now = bpf_ktime_get_boot_ns();
	if (v->expires_boot_ns > now)
		return 1;
	if (use != EGR_RES_SEND)
		return 0;
	u = bpf_map_lookup_elem(&egr_resuse_v1, &k);
	return u && egr_sends_keep_until(u->last_used_ns, (__u64)v->keep_s * 1000000000ull) > now;
}

/* The policy's decision for one destination of sandbox sb.  port is in host
 * order; use: how a learned address counts (enum egr_resolved_use). */
static __always_inline struct egr_decision egr_judge_use(const struct egr_cgroup_val *sb,
							 const struct egr_policy_val *pol,
							 const struct egr_addr *a, __u16 port, int use)
{
	__u32 pid = sb->policy_id;

	if (egr_addr_is_v4(a)) {
		if (egr_v4_protected(pid, a->w[3]))
			return egr_deny(pol, EGR_REASON_PROTECTED);
		if (egr_v4_allowed(pid, a->w[3], port))
			return egr_decide(EGR_PASS, EGR_REASON_ALLOWED);
	} else {
		if (egr_embedded_v4_protected(pid, a))
			return egr_deny(pol, EGR_REASON_PROTECTED);
		if (egr_v6_protected(pid, a))
			return egr_deny(pol, EGR_REASON_PROTECTED);
		if (egr_v6_allowed(pid, a, port))
			return egr_decide(EGR_PASS, EGR_REASON_ALLOWED);
	}
	if (egr_resolved_allowed(sb->sandbox_id, a, use))
		return egr_decide(EGR_PASS, EGR_REASON_RESOLVED);
	if (pol->default_verdict == EGR_VERDICT_ALLOW)
		return egr_decide(EGR_PASS, EGR_REASON_DEFAULT);
	return egr_deny(pol, EGR_REASON_DEFAULT);
}

/* A new destination: a learned address counts until its expiry. */
static __always_inline struct egr_decision egr_judge(const struct egr_cgroup_val *sb,
						     const struct egr_policy_val *pol,
						     const struct egr_addr *a, __u16 port)
{
	return egr_judge_use(sb, pol, a, port, EGR_RES_NEW);
}

#endif
