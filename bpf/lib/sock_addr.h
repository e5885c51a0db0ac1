/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* connect4/6 and sendmsg4/6: judge the destination the caller named, before
 * the kernel does anything with it.  With on-deny=reject the call fails with
 * EPERM at once; with on-deny=drop the call proceeds and the skb backstop
 * drops every packet, which is what the seeds' nftables sidecar looked like
 * to a client (a hang until its own timeout). */
#ifndef EGRESSD_BPF_LIB_SOCK_ADDR_H
#define EGRESSD_BPF_LIB_SOCK_ADDR_H

#include "lib/maps.h"
#include "lib/addr.h"
#include "lib/decision.h"
#include "lib/verdict.h"
#include "lib/judge_once.h"
#include "lib/dns_redirect.h"
#include "lib/audit_mode.h"
#include "lib/resolved_use.h"

/* is_v4 is a constant per program: each SEC() wrapper gets straight-line
 * context reads (the verifier rejects a computed context pointer). */
static __always_inline void egr_sock_addr_dst(struct bpf_sock_addr *ctx, int is_v4,
					      struct egr_addr *a)
{
	if (is_v4) {
		egr_addr_from_v4(a, ctx->user_ip4);
		egr_addr_unspecified_to_loopback(a);
		return;
	}
	a->w[0] = ctx->user_ip6[0];
	a->w[1] = ctx->user_ip6[1];
	a->w[2] = ctx->user_ip6[2];
	a->w[3] = ctx->user_ip6[3];
	egr_addr_unspecified_to_loopback(a);
}

static __always_inline int egr_in_foreign_netns(struct bpf_sock_addr *ctx)
{
	const struct egr_config_val *cfg = egr_config();

	/* Without a configured node netns every netns is governed (fail closed). */
	if (!cfg || !cfg->node_netns_cookie)
		return 0;
	return bpf_get_netns_cookie(ctx) != cfg->node_netns_cookie;
}

/* SO_BINDTODEVICE to a real link sends even 127.0.0.1 out of it.  (An
 * IP_UNICAST_IF or IP_PKTINFO ifindex is invisible here: the backstop judges
 * the device the packet really leaves on.) */
static __always_inline int egr_bound_off_loopback(struct bpf_sock_addr *ctx)
{
	struct bpf_sock *sk = ctx->sk;
	__u32 dev;

	if (!sk)
		return 0;
	dev = sk->bound_dev_if;
	return dev != 0 && dev != 1 /* lo */;
}

enum egr_note {
	EGR_NOTE_CONNECT_ALLOWED, /* connect() allowed: remember the destination */
	EGR_NOTE_CONNECT_DENIED,  /* connect() denied: forget any earlier one */
	EGR_NOTE_SENDMSG,         /* sendmsg() to an address: not a connection */
};

/* Remembers what connect() decided, so the backstop recognises the packets of
 * an allowed connection and knows a TCP socket was actively opened (a TCP
 * socket with no record was never connect()ed: it is a listener or accepted). */
static __always_inline int egr_note_socket(struct bpf_sock_addr *ctx,
					    const struct egr_cgroup_val *sb,
					    const struct egr_addr *a,
					    enum egr_note note, int foreign, int resolved)
{
	struct bpf_sock *sk = ctx->sk;
	struct egr_sock_val *st;
	__u16 netns_flag = foreign ? EGR_SOCK_FOREIGN_NETNS : 0;

	if (!sk)
		return 0;
	st = bpf_sk_storage_get(&egr_sock_v2, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!st)
		return 0;
	switch (note) {
	case EGR_NOTE_CONNECT_ALLOWED:
		egr_use_drop(st); /* a connected UDP socket connecting elsewhere */
		__builtin_memcpy(st->addr, a->b, 16);
		st->port = (__u16)ctx->user_port;
		st->policy_id = sb->policy_id;
		st->sandbox_id = sb->sandbox_id;
		st->flags = EGR_SOCK_ACTIVE | EGR_SOCK_CONNECTED | netns_flag;
		if (resolved)
			egr_use_hold(st);
		break;
	case EGR_NOTE_CONNECT_DENIED:
		egr_use_drop(st);
		st->flags = EGR_SOCK_ACTIVE | netns_flag;
		break;
	case EGR_NOTE_SENDMSG:
		st->flags |= EGR_SOCK_ACTIVE | netns_flag;
		if (resolved)
			egr_use_send(sb->sandbox_id, a);
		break;
	}
	return 1;
}

/* Judges the destination a sandbox's connect() or sendmsg() names; sb is NULL
 * when the caller is no sandbox.  A silent denial (EGR_DENY_DROP) lets the
 * call proceed and leaves its packets to the backstop, which needs the socket
 * marked as actively opened: if it cannot be marked, the decision is to
 * reject (a TCP socket without a mark would pass the backstop as inbound). */
static __always_inline struct egr_decision egr_sock_addr_judge(struct bpf_sock_addr *ctx,
							       const struct egr_cgroup_val *sb,
							       int is_v4, int is_connect)
{
	struct egr_policy_val *pol;
	struct egr_decision d;
	struct egr_addr dst;
	int foreign;
	__u16 port;

	if (!sb)
		return egr_decide(EGR_PASS, EGR_REASON_NOT_SANDBOX);
	if (sb->kind != EGR_CG_SANDBOX)
		return egr_decide(EGR_DENY_REJECT, EGR_REASON_CONTAINED);

	egr_sock_addr_dst(ctx, is_v4, &dst);
	port = bpf_ntohs((__u16)ctx->user_port);
	foreign = egr_in_foreign_netns(ctx);

	/* DNS first, before any address check (lib/dns_redirect.h). */
	switch (egr_dns_redirect(ctx, sb, &dst, is_v4, is_connect,
				 foreign ? EGR_SOCK_FOREIGN_NETNS : 0)) {
	case EGR_DNS_REDIRECTED:
		return egr_decide(EGR_PASS, EGR_REASON_DNS_REDIRECT);
	case EGR_DNS_OWN_ENDPOINT:
		return egr_decide(EGR_PASS, EGR_REASON_DNS_ENDPOINT);
	case EGR_DNS_REFUSED:
		if (is_connect) /* the socket keeps no record of an allowed destination */
			egr_note_socket(ctx, sb, &dst, EGR_NOTE_CONNECT_DENIED, foreign, 0);
		return egr_decide(EGR_DENY_REJECT, EGR_REASON_DNS_REFUSED);
	default:
		break;
	}

	pol = bpf_map_lookup_elem(&egr_policy_v1, &sb->policy_id);
	if (!pol)
		d = egr_deny(pol, EGR_REASON_NO_POLICY);
	else if (egr_addr_is_loopback(&dst) && egr_bound_off_loopback(ctx))
		d = egr_deny(pol, EGR_REASON_LOOPBACK_LEAVES);
	else if (foreign && egr_addr_is_loopback(&dst))
		d = egr_decide(EGR_PASS, EGR_REASON_OWN_LOOPBACK);
	else
		/* A connect needs an unexpired learned address; a send also
		 * passes while the sandbox's sends keep one (QUIC). */
		d = egr_audit_only(pol, egr_judge_use_once(sb, pol, &dst, port,
								   is_connect ? EGR_RES_NEW : EGR_RES_SEND));

	if (egr_lets_through(d)) { /* a would-deny is a connection like any other */
		egr_note_socket(ctx, sb, &dst,
				is_connect ? EGR_NOTE_CONNECT_ALLOWED : EGR_NOTE_SENDMSG, foreign,
				d.reason == EGR_REASON_RESOLVED);
		return d;
	}
	if (!egr_note_socket(ctx, sb, &dst,
			     is_connect ? EGR_NOTE_CONNECT_DENIED : EGR_NOTE_SENDMSG, foreign, 0))
		d.action = EGR_DENY_REJECT;
	return d;
}

#endif
