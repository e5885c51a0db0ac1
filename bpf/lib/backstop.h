/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* The backstop: every packet a sandbox sends is judged by
 * its real header destination (and every routing-header hop), so raw
 * sockets, ICMP, SCTP and source routing cannot reach what connect() would
 * have refused.  Packets of connections connect() allowed are recognised by
 * socket storage, and TCP sockets that were never connect()ed (listeners and
 * accepted connections) pass, so replies and inbound service are unaffected;
 * a TCP SYN, though, is an active open and passes only with a record.
 * The skb mark is never consulted: there is no exemption to forge. */
#ifndef EGRESSD_BPF_LIB_BACKSTOP_H
#define EGRESSD_BPF_LIB_BACKSTOP_H

#include "lib/maps.h"
#include "lib/addr.h"
#include "lib/packet.h"
#include "lib/decision.h"
#include "lib/verdict.h"
#include "lib/judge_once.h"
#include "lib/dns_redirect.h"
#include "lib/audit_mode.h"

#define EGR_LOOPBACK_IFINDEX 1 /* `lo` has this index in every netns */

/* Every hop of an IPv6 routing header is a destination too. */
static __always_inline struct egr_decision egr_judge_segments(struct __sk_buff *skb,
							      const struct egr_cgroup_val *sb,
							      const struct egr_policy_val *pol,
							      const struct egr_pkt *p)
{
	for (int i = 0; i < EGR_MAX_RH_SEGMENTS; i++) {
		struct egr_addr hop;

		if (i >= p->nsegments)
			break;
		if (bpf_skb_load_bytes(skb, p->rh_offset + i * 16, hop.b, 16))
			return egr_deny(pol, EGR_REASON_MALFORMED);
		if (!egr_passes(egr_judge_once(sb, pol, &hop, p->dport)))
			return egr_deny(pol, EGR_REASON_ROUTING_HOP);
	}
	return egr_decide(EGR_PASS, EGR_REASON_ALLOWED);
}

/* Judges one packet that sandbox sb sends; sb is NULL when the sender is no
 * sandbox.  Who the sandbox is stays with the entry point (the socket's
 * cgroup for cgroup_skb; a tc program learns it otherwise), and l3_off is
 * where its network header starts.  The socket shortcuts apply only when the
 * skb still carries its sending socket. */
static __always_inline struct egr_decision egr_backstop_judge(struct __sk_buff *skb,
							      __u32 l3_off,
							      const struct egr_cgroup_val *sb)
{
	struct egr_policy_val *pol;
	struct egr_sock_val *st = NULL;
	struct egr_decision d;
	struct bpf_sock *sk;
	struct egr_pkt p = {};
	int parsed, unspecified, to_peer;

	if (!sb)
		return egr_decide(EGR_PASS, EGR_REASON_NOT_SANDBOX);
	if (sb->kind != EGR_CG_SANDBOX)
		return egr_decide(EGR_DENY_REJECT, EGR_REASON_CONTAINED);
	pol = bpf_map_lookup_elem(&egr_policy_v1, &sb->policy_id);

	parsed = egr_parse_packet_once(skb, l3_off, &p);
	if (parsed == EGR_PARSE_NOT_IP) /* cgroup inet egress sees only IP; be explicit */
		return egr_decide(EGR_PASS, EGR_REASON_NOT_IP);
	if (parsed != EGR_PARSE_OK)
		return egr_deny(pol, EGR_REASON_MALFORMED);
	if (!pol)
		return egr_deny(pol, EGR_REASON_NO_POLICY);
	/* A header addressed to the unspecified address follows whatever route
	 * the kernel finds for it (a ping socket's :: leaves on the default
	 * route): judged as the loopback it names, never exempt as the
	 * sandbox's own. */
	unspecified = egr_addr_is_unspecified(&p.dst);
	egr_addr_unspecified_to_loopback(&p.dst);

	sk = skb->sk;
	if (sk)
		sk = bpf_sk_fullsock(sk);
	if (sk)
		st = bpf_sk_storage_get(&egr_sock_v2, sk, 0, 0);

	/* Loopback stays in the namespace only on `lo`: bound to another
	 * device (SO_BINDTODEVICE, IP_UNICAST_IF, an IP_PKTINFO ifindex) it
	 * leaves on the link, where a next hop with route_localnet=1 answers
	 * on its own 127.0.0.1.  The device is judged here, not at the hooks,
	 * because a cmsg ifindex never reaches sendmsg programs.  (A header
	 * addressed to :: itself is judged by the policy as loopback below.) */
	if (egr_addr_is_loopback(&p.dst) && !p.nsegments && !unspecified) {
		if (skb->ifindex != EGR_LOOPBACK_IFINDEX)
			return egr_deny(pol, EGR_REASON_LOOPBACK_LEAVES);
		if (st && (st->flags & EGR_SOCK_FOREIGN_NETNS))
			return egr_decide(EGR_PASS, EGR_REASON_OWN_LOOPBACK);
	}

	/* Before the policy: an endpoint may lie in a protected range (a pod
	 * gateway) or on the node's loopback, and port 53 is never judged by
	 * the policy at all. */
	switch (egr_dns_backstop(sb, st, &p.dst, p.dport, p.nsegments)) {
	case EGR_DNS_REDIRECTED:
		return egr_decide(EGR_PASS, EGR_REASON_DNS_ENDPOINT);
	case EGR_DNS_REFUSED:
		return egr_deny(pol, EGR_REASON_DNS_REFUSED);
	default:
		break;
	}

	if (st && (st->flags & EGR_SOCK_CONNECTED) && !p.nsegments &&
	    egr_addr_eq(&p.dst, st->addr) && st->port == bpf_htons(p.dport) &&
	    st->policy_id == sb->policy_id)
		return egr_decide(EGR_PASS, EGR_REASON_CONNECTED); /* under the policy in force */

	if (sk && sk->type == 1 /* SOCK_STREAM */ && sk->protocol == IPPROTO_TCP) {
		/* A kernel TCP socket's SYN is an active open, and every active
		 * open a sandbox makes passes connect4/6, which records it.  One
		 * without an allowing record was opened where no sandbox was
		 * the caller: by a kernel worker (an MPTCP subflow the path
		 * manager opened towards an announced address) or by a process
		 * outside the sandbox holding the sandbox's socket. */
		if (p.opens_tcp && !(st && (st->flags & EGR_SOCK_CONNECTED) &&
				     egr_addr_eq(&p.dst, st->addr)))
			return egr_deny(pol, EGR_REASON_UNRECORDED_OPEN);
		if (!st)
			return egr_decide(EGR_PASS, EGR_REASON_INBOUND_TCP); /* listener or accepted */
	}

	/* A socket connected to a learned address keeps it across a policy
	 * change while the entry exists (the change deleted the entries of
	 * names it removed); unconnected sends count as sends. */
	to_peer = st && (st->flags & EGR_SOCK_CONNECTED) && egr_addr_eq(&p.dst, st->addr);
	d = egr_judge_use_once(sb, pol, &p.dst, p.dport, to_peer ? EGR_RES_HELD : EGR_RES_SEND);
	if (!egr_passes(d))
		/* An audit-only sandbox's would-deny returns here, before the
		 * routing-header hops: a source-routed packet to a destination
		 * the policy does not allow stays refused, and the verifier
		 * does not walk the hops once more for it. */
		return p.nsegments ? d : egr_audit_only(pol, d);
	if (p.nsegments) {
		struct egr_decision hops = egr_judge_segments(skb, sb, pol, &p);

		if (!egr_passes(hops))
			return hops;
	}

	/* The policy was flipped and still allows this connection: carry on. */
	if (to_peer)
		st->policy_id = sb->policy_id;
	return d;
}

#endif
