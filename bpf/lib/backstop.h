/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* The cgroup_skb/egress backstop: every packet a sandbox sends is judged by
 * its real header destination (and every routing-header hop), so raw
 * sockets, ICMP, SCTP and source routing cannot reach what connect() would
 * have refused.  Packets of connections connect() allowed are recognised by
 * socket storage, and TCP sockets that were never connect()ed (listeners and
 * accepted connections) pass, so replies and inbound service are unaffected.
 * The skb mark is never consulted: there is no exemption to forge. */
#ifndef EGRESSD_BPF_LIB_BACKSTOP_H
#define EGRESSD_BPF_LIB_BACKSTOP_H

#include "lib/maps.h"
#include "lib/addr.h"
#include "lib/packet.h"
#include "lib/sandbox.h"
#include "lib/verdict.h"

/* cgroup_skb egress return codes. */
#define EGR_SKB_PASS 1
#define EGR_SKB_REJECT 0  /* dropped; the sending call sees EPERM */
#define EGR_SKB_DROP_CN 2 /* dropped; reported as congestion, i.e. silently */

static __always_inline int egr_segments_allowed(struct __sk_buff *skb,
						const struct egr_cgroup_val *sb,
						const struct egr_policy_val *pol,
						const struct egr_pkt *p)
{
	for (int i = 0; i < EGR_MAX_RH_SEGMENTS; i++) {
		struct egr_addr hop;

		if (i >= p->nsegments)
			break;
		if (bpf_skb_load_bytes(skb, p->rh_offset + i * 16, hop.b, 16))
			return 0;
		if (egr_judge(sb, pol, &hop, p->dport) != EGR_VERDICT_ALLOW)
			return 0;
	}
	return 1;
}

static __always_inline int egr_backstop(struct __sk_buff *skb)
{
	struct egr_cgroup_val *sb = egr_sandbox_of_skb(skb);
	struct egr_policy_val *pol;
	struct egr_sock_val *st = NULL;
	struct bpf_sock *sk;
	struct egr_pkt p = {};
	int parsed, deny;

	if (!sb)
		return EGR_SKB_PASS;
	if (sb->kind != EGR_CG_SANDBOX) {
		egr_count(EGR_STAT_CONTAINED_DENY);
		return EGR_SKB_REJECT;
	}
	pol = bpf_map_lookup_elem(&egr_policy_v1, &sb->policy_id);
	deny = pol && pol->deny_action == EGR_ACTION_DROP ? EGR_SKB_DROP_CN : EGR_SKB_REJECT;

	parsed = egr_parse_packet(skb, &p);
	if (parsed == EGR_PARSE_NOT_IP)
		return EGR_SKB_PASS; /* cgroup inet egress sees only IP; be explicit */
	if (parsed != EGR_PARSE_OK || !pol)
		goto denied;

	sk = skb->sk;
	if (sk)
		sk = bpf_sk_fullsock(sk);
	if (sk)
		st = bpf_sk_storage_get(&egr_sock_v1, sk, 0, 0);

	if (st && (st->flags & EGR_SOCK_FOREIGN_NETNS) && !p.nsegments &&
	    egr_addr_is_loopback(&p.dst))
		goto passed; /* stays inside the sandbox's own network namespace */

	if (st && (st->flags & EGR_SOCK_CONNECTED) && !p.nsegments &&
	    egr_addr_eq(&p.dst, st->addr) && st->port == bpf_htons(p.dport) &&
	    st->policy_id == sb->policy_id)
		goto passed; /* connect() allowed it under the policy in force */

	if (!st && sk && sk->type == 1 /* SOCK_STREAM */ && sk->protocol == IPPROTO_TCP)
		goto passed; /* never connect()ed: a listener or an accepted socket */

	if (egr_judge(sb, pol, &p.dst, p.dport) != EGR_VERDICT_ALLOW ||
	    !egr_segments_allowed(skb, sb, pol, &p))
		goto denied;

	/* The policy was flipped and still allows this connection: carry on. */
	if (st && (st->flags & EGR_SOCK_CONNECTED) && egr_addr_eq(&p.dst, st->addr))
		st->policy_id = sb->policy_id;
passed:
	egr_count(EGR_STAT_SKB_PASS);
	return EGR_SKB_PASS;
denied:
	egr_count(EGR_STAT_SKB_DROP);
	return deny;
}

#endif
