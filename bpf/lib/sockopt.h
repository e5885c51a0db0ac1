/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* setsockopt: the options that make the kernel itself send to an address the
 * sandbox chose, with no connect() or sendmsg() to judge.  Joining a
 * multicast group sends IGMP/MLD reports naming the group on the link (a
 * covert channel, even airgapped), and those reports carry no socket, so the
 * skb backstop never sees them: the join is judged here, by its group, as a
 * destination.  SO_BROADCAST is what lets a socket send to a broadcast
 * address (255.255.255.255 or a subnet's), so it is judged as
 * 255.255.255.255.  Every other option passes untouched. */
#ifndef EGRESSD_BPF_LIB_SOCKOPT_H
#define EGRESSD_BPF_LIB_SOCKOPT_H

#include "lib/maps.h"
#include "lib/addr.h"
#include "lib/decision.h"
#include "lib/verdict.h"

/* uapi values (#defines, so absent from vmlinux.h BTF). */
#define EGR_SOL_SOCKET 1
#define EGR_SO_BROADCAST 6
#define EGR_SOL_IP 0
#define EGR_IP_ADD_MEMBERSHIP 35
#define EGR_IP_ADD_SOURCE_MEMBERSHIP 39
#define EGR_MCAST_JOIN_GROUP 42
#define EGR_MCAST_JOIN_SOURCE_GROUP 46
#define EGR_SOL_IPV6 41
#define EGR_IPV6_ADD_MEMBERSHIP 20 /* IPV6_JOIN_GROUP */
#define EGR_AF_INET 2
#define EGR_AF_INET6 10
/* struct group_req and group_source_req put the group's sockaddr at 8 (after
 * the interface index and padding); a 32-bit caller's packed compat layout
 * puts it at 4.  Which one the kernel reads is not visible here, so both are
 * judged. */
#define EGR_GROUP_SA_NATIVE 8
#define EGR_GROUP_SA_COMPAT 4

enum egr_sockopt_group {
	EGR_GROUP_NONE = 0, /* no sockaddr family there: the kernel refuses it */
	EGR_GROUP_FOUND,
	EGR_GROUP_SHORT,    /* the value ends before the group */
};

/* The option as the program sees it: its value [v, end) is the first page
 * of what the caller passed. */
struct egr_sockopt {
	__u8 *v;
	__u8 *end;
	int level;
	int name;
};

/* Each context field is read once, here: the verifier refuses a context
 * pointer the compiler offset to share one load between two fields. */
static __always_inline void egr_sockopt_read(struct bpf_sockopt *ctx, struct egr_sockopt *o)
{
	o->v = ctx->optval;
	o->end = ctx->optval_end;
	o->level = ctx->level;
	o->name = ctx->optname;
}

/* Reads the group of a sockaddr at offset off of the option's value. */
static __always_inline int egr_sockopt_sa_group(const struct egr_sockopt *o, __u32 off,
						struct egr_addr *g)
{
	__u8 *v = o->v;
	__u8 *end = o->end;
	__u16 family;

	if (v + off + 2 > end)
		return EGR_GROUP_SHORT;
	family = *(__u16 *)(v + off);
	if (family == EGR_AF_INET) {
		if (v + off + 8 > end)
			return EGR_GROUP_SHORT;
		egr_addr_from_v4(g, *(__u32 *)(v + off + 4));
		return EGR_GROUP_FOUND;
	}
	if (family == EGR_AF_INET6) {
		if (v + off + 24 > end)
			return EGR_GROUP_SHORT;
		__builtin_memcpy(g->b, v + off + 8, 16);
		return EGR_GROUP_FOUND;
	}
	return EGR_GROUP_NONE;
}

/* The policy's decision on destination a as a socket option asks it. */
static __always_inline struct egr_decision egr_sockopt_dst(const struct egr_cgroup_val *sb,
							   const struct egr_policy_val *pol,
							   const struct egr_addr *a)
{
	struct egr_decision d = egr_judge(sb, pol, a, 0); /* no port: all-ports entries only */

	/* There is no silent form of a refused option: it fails at once. */
	if (!egr_passes(d))
		d.action = EGR_DENY_REJECT;
	return d;
}

/* A group_req / group_source_req: both layouts' groups must pass. */
static __always_inline struct egr_decision egr_sockopt_group_req(const struct egr_sockopt *o,
								 const struct egr_cgroup_val *sb,
								 const struct egr_policy_val *pol)
{
	struct egr_decision d = egr_decide(EGR_PASS, EGR_REASON_ALLOWED);
	struct egr_addr g;
	int r;

	r = egr_sockopt_sa_group(o, EGR_GROUP_SA_NATIVE, &g);
	if (r == EGR_GROUP_SHORT)
		return egr_decide(EGR_DENY_REJECT, EGR_REASON_MALFORMED);
	if (r == EGR_GROUP_FOUND) {
		d = egr_sockopt_dst(sb, pol, &g);
		if (!egr_passes(d))
			return d;
	}
	r = egr_sockopt_sa_group(o, EGR_GROUP_SA_COMPAT, &g);
	if (r == EGR_GROUP_FOUND)
		d = egr_sockopt_dst(sb, pol, &g);
	return d;
}

/* Judges one setsockopt() of sandbox sb (NULL: no sandbox). */
static __always_inline struct egr_decision egr_sockopt_judge(const struct egr_sockopt *o,
							     const struct egr_cgroup_val *sb)
{
	struct egr_policy_val *pol;
	struct egr_addr a;
	__u8 *v = o->v;
	__u8 *end = o->end;
	int level = o->level, name = o->name;
	int broadcast = level == EGR_SOL_SOCKET && name == EGR_SO_BROADCAST;
	int join4 = level == EGR_SOL_IP &&
		    (name == EGR_IP_ADD_MEMBERSHIP || name == EGR_IP_ADD_SOURCE_MEMBERSHIP);
	int join6 = level == EGR_SOL_IPV6 && name == EGR_IPV6_ADD_MEMBERSHIP;
	int join_req = (level == EGR_SOL_IP || level == EGR_SOL_IPV6) &&
		       (name == EGR_MCAST_JOIN_GROUP || name == EGR_MCAST_JOIN_SOURCE_GROUP);

	if (!sb)
		return egr_decide(EGR_PASS, EGR_REASON_NOT_SANDBOX);
	if (!broadcast && !join4 && !join6 && !join_req)
		return egr_decide(EGR_PASS, EGR_REASON_NOT_IP); /* not a destination */
	if (sb->kind != EGR_CG_SANDBOX)
		return egr_decide(EGR_DENY_REJECT, EGR_REASON_CONTAINED);
	pol = bpf_map_lookup_elem(&egr_policy_v1, &sb->policy_id);
	if (!pol)
		return egr_decide(EGR_DENY_REJECT, EGR_REASON_NO_POLICY);

	if (broadcast) {
		if (v + 4 > end)
			return egr_decide(EGR_DENY_REJECT, EGR_REASON_MALFORMED);
		if (*(__u32 *)v == 0) /* turning it off */
			return egr_decide(EGR_PASS, EGR_REASON_ALLOWED);
		egr_addr_from_v4(&a, 0xffffffff);
		return egr_sockopt_dst(sb, pol, &a);
	}
	if (join4) { /* ip_mreq, ip_mreqn, ip_mreq_source: the group first */
		if (v + 4 > end)
			return egr_decide(EGR_DENY_REJECT, EGR_REASON_MALFORMED);
		egr_addr_from_v4(&a, *(__u32 *)v);
		return egr_sockopt_dst(sb, pol, &a);
	}
	if (join6) { /* ipv6_mreq: the group first */
		if (v + 16 > end)
			return egr_decide(EGR_DENY_REJECT, EGR_REASON_MALFORMED);
		__builtin_memcpy(a.b, v, 16);
		return egr_sockopt_dst(sb, pol, &a);
	}
	return egr_sockopt_group_req(o, sb, pol);
}

#endif
