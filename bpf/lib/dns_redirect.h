/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* A sandbox asks no resolver but egressd's.  Every TCP or UDP connect() or
 * sendmsg() a sandbox makes to port 53, whatever the address, is rewritten to
 * the sandbox's own DNS endpoint (egr_dns_v1), before any address check: a
 * pod's resolver may sit in a protected range (a cluster DNS service in 10/8,
 * a node-local cache at 169.254.20.10), and the query must reach the proxy,
 * not be refused.  Because each sandbox has an endpoint of its own, the proxy
 * knows whose query it reads from the socket it arrived on: the kernel made
 * that binding here, and nothing the sandbox chose can change it.
 *
 * The socket remembers the resolver it asked (egr_sock_val.dns_orig), so
 * recvmsg4/6 and getpeername4/6 show replies and the peer as coming from it:
 * `dig @8.8.8.8` and glibc drop an answer from any other source.  Only one
 * resolver per socket is remembered, the last one asked; a socket that asks
 * two resolvers at once sees every answer come from the last.
 *
 * Fails closed: a sandbox without an endpoint (or without one of the family
 * it asked in) has its query refused, and naming an endpoint directly is
 * refused too (it would be a query the kernel did not bind).  The backstop
 * (lib/backstop.h) drops the rest: packets to port 53 that did not come
 * through here, and packets to an endpoint from any socket but a redirected
 * one of the endpoint's own sandbox. */
#ifndef EGRESSD_BPF_LIB_DNS_REDIRECT_H
#define EGRESSD_BPF_LIB_DNS_REDIRECT_H

#include "lib/maps.h"
#include "lib/addr.h"
#include "lib/decision.h"

#define EGR_DNS_PORT 53

enum egr_dns_step {
	EGR_DNS_NOT_DNS = 0, /* neither port 53 nor an endpoint: judge as usual */
	EGR_DNS_REDIRECTED,  /* rewritten to the sandbox's endpoint */
	EGR_DNS_REFUSED,     /* no endpoint, or an endpoint named directly */
	EGR_DNS_OWN_ENDPOINT, /* the endpoint a redirected connect() chose, again */
};

/* The endpoint at a destination (16-byte canonical form), or NULL. */
static __always_inline const struct egr_dnsep_val *egr_dns_endpoint_at(const struct egr_addr *a,
									__u16 port_be)
{
	struct egr_dnsep_key k = { .port = port_be };

	__builtin_memcpy(k.addr, a->b, 16);
	return bpf_map_lookup_elem(&egr_dnsep_v1, &k);
}

/* Where the query of sandbox sb to dst goes instead: the endpoint of the
 * family the sandbox asked in, an IPv4-mapped destination (a dual-stack IPv6
 * socket asking an IPv4 resolver) to ::ffff:endpoint4.  0 when the sandbox
 * has no endpoint of that family. */
static __always_inline int egr_dns_target(const struct egr_cgroup_val *sb, const struct egr_addr *dst,
					  struct egr_addr *ep, __u16 *port_be)
{
	const struct egr_dns_val *v = bpf_map_lookup_elem(&egr_dns_v1, &sb->sandbox_id);

	if (!v || !v->port)
		return 0;
	*port_be = v->port;
	if (egr_addr_is_v4(dst)) {
		if (!v->addr4)
			return 0;
		egr_addr_from_v4(ep, v->addr4);
		return 1;
	}
	__builtin_memcpy(ep->b, v->addr6, 16);
	return !egr_addr_is_unspecified(ep);
}

/* Records the redirect on the socket.  A connect() makes the endpoint the
 * socket's connected destination, so the backstop's record of it describes
 * the packets the socket really sends; a sendmsg() keeps whatever connection
 * the socket has (a UDP socket may send elsewhere by address too).  0 when
 * the socket cannot carry the record: its packets would then be dropped at
 * the endpoint, so the caller refuses at once instead. */
static __always_inline int egr_dns_note(struct bpf_sock_addr *ctx, const struct egr_cgroup_val *sb,
					const struct egr_addr *orig, __u16 orig_port_be,
					const struct egr_addr *ep, __u16 ep_port_be, int is_connect,
					__u16 netns_flag)
{
	struct egr_sock_val *st;

	if (!ctx->sk)
		return 0;
	st = bpf_sk_storage_get(&egr_sock_v2, ctx->sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!st)
		return 0;
	if (is_connect) {
		__builtin_memcpy(st->addr, ep->b, 16);
		st->port = ep_port_be;
		st->policy_id = sb->policy_id;
		st->flags = EGR_SOCK_ACTIVE | EGR_SOCK_CONNECTED | EGR_SOCK_DNS_REDIRECTED | netns_flag;
	} else {
		st->flags |= EGR_SOCK_ACTIVE | EGR_SOCK_DNS_REDIRECTED | netns_flag;
	}
	st->sandbox_id = sb->sandbox_id;
	__builtin_memcpy(st->dns_orig, orig->b, 16);
	st->dns_orig_port = orig_port_be;
	return 1;
}

/* A dual-stack socket connect()ed to ::ffff:resolver was redirected to
 * ::ffff:endpoint4; each send() on it then reaches sendmsg4 naming that
 * endpoint (udpv6_sendmsg hands a v4-mapped peer to udp_sendmsg as an
 * address).  That is the redirect's own destination, not a direct use. */
static __always_inline int egr_dns_connected_to(struct bpf_sock_addr *ctx, const struct egr_cgroup_val *sb,
						const struct egr_dnsep_val *owner, const struct egr_addr *dst,
						__u16 port_be)
{
	struct egr_sock_val *st;
	const __u16 want = EGR_SOCK_CONNECTED | EGR_SOCK_DNS_REDIRECTED;

	if (!ctx->sk || owner->sandbox_id != sb->sandbox_id)
		return 0;
	st = bpf_sk_storage_get(&egr_sock_v2, ctx->sk, 0, 0);
	return st && (st->flags & want) == want && st->sandbox_id == owner->sandbox_id &&
	       egr_addr_eq(dst, st->addr) && st->port == port_be;
}

/* is_v4 is the program's family (a constant per SEC() wrapper: straight-line
 * context writes).  dst is the destination as the sandbox named it, in the
 * canonical form (unspecified already turned into loopback). */
static __always_inline enum egr_dns_step egr_dns_redirect(struct bpf_sock_addr *ctx,
							  const struct egr_cgroup_val *sb,
							  const struct egr_addr *dst, int is_v4,
							  int is_connect, __u16 netns_flag)
{
	__u16 port_be = (__u16)ctx->user_port;
	struct egr_addr ep;
	__u16 ep_port_be;

	if (ctx->protocol != IPPROTO_UDP && ctx->protocol != IPPROTO_TCP)
		return EGR_DNS_NOT_DNS; /* ping sockets: no port (the backstop sees the rest) */
	if (port_be != bpf_htons(EGR_DNS_PORT)) {
		const struct egr_dnsep_val *owner = egr_dns_endpoint_at(dst, port_be);

		if (!owner)
			return EGR_DNS_NOT_DNS;
		if (egr_dns_connected_to(ctx, sb, owner, dst, port_be))
			return EGR_DNS_OWN_ENDPOINT;
		egr_count(EGR_STAT_DNS_DENY);
		return EGR_DNS_REFUSED;
	}
	if (!egr_dns_target(sb, dst, &ep, &ep_port_be) ||
	    !egr_dns_note(ctx, sb, dst, port_be, &ep, ep_port_be, is_connect, netns_flag)) {
		egr_count(EGR_STAT_DNS_DENY);
		return EGR_DNS_REFUSED;
	}
	egr_count(EGR_STAT_DNS_REDIRECT);
	if (is_v4) {
		ctx->user_ip4 = ep.w[3];
	} else {
		ctx->user_ip6[0] = ep.w[0];
		ctx->user_ip6[1] = ep.w[1];
		ctx->user_ip6[2] = ep.w[2];
		ctx->user_ip6[3] = ep.w[3];
	}
	ctx->user_port = ep_port_be;
	return EGR_DNS_REDIRECTED;
}

/* recvmsg4/6 and getpeername4/6: the peer of a redirected socket, when it is
 * the endpoint of the socket's own sandbox, is shown as the resolver the
 * sandbox asked.  src is the peer as the kernel reports it.  Returns 1 and
 * fills orig when it should be rewritten. */
static __always_inline int egr_dns_shown_peer(struct bpf_sock_addr *ctx, const struct egr_addr *src,
					      struct egr_addr *orig, __u16 *orig_port_be)
{
	const struct egr_dnsep_val *owner;
	struct egr_sock_val *st;

	if (!ctx->sk)
		return 0;
	st = bpf_sk_storage_get(&egr_sock_v2, ctx->sk, 0, 0);
	if (!st || !(st->flags & EGR_SOCK_DNS_REDIRECTED))
		return 0;
	owner = egr_dns_endpoint_at(src, (__u16)ctx->user_port);
	if (!owner || owner->sandbox_id != st->sandbox_id)
		return 0;
	__builtin_memcpy(orig->b, st->dns_orig, 16);
	*orig_port_be = st->dns_orig_port;
	return 1;
}

static __always_inline void egr_dns_restore_peer4(struct bpf_sock_addr *ctx)
{
	struct egr_addr src, orig;
	__u16 port_be;

	egr_addr_from_v4(&src, ctx->user_ip4);
	if (!egr_dns_shown_peer(ctx, &src, &orig, &port_be) || !egr_addr_is_v4(&orig))
		return;
	ctx->user_ip4 = orig.w[3];
	ctx->user_port = port_be;
}

static __always_inline void egr_dns_restore_peer6(struct bpf_sock_addr *ctx)
{
	struct egr_addr src, orig;
	__u16 port_be;

	src.w[0] = ctx->user_ip6[0];
	src.w[1] = ctx->user_ip6[1];
	src.w[2] = ctx->user_ip6[2];
	src.w[3] = ctx->user_ip6[3];
	if (!egr_dns_shown_peer(ctx, &src, &orig, &port_be))
		return;
	ctx->user_ip6[0] = orig.w[0];
	ctx->user_ip6[1] = orig.w[1];
	ctx->user_ip6[2] = orig.w[2];
	ctx->user_ip6[3] = orig.w[3];
	ctx->user_port = port_be;
}

/* The backstop's part.  A packet to an endpoint passes only from a socket the
 * redirect marked, of the sandbox that owns the endpoint (a raw socket, a
 * spoofed source, another sandbox's endpoint: dropped); a packet to port 53
 * never passes (whatever reached here without the redirect is a bypass). */
static __always_inline enum egr_dns_step egr_dns_backstop(const struct egr_cgroup_val *sb,
							  const struct egr_sock_val *st,
							  const struct egr_addr *dst, __u16 dport,
							  __u8 nsegments)
{
	const struct egr_dnsep_val *owner;

	if (dport != EGR_DNS_PORT) {
		owner = egr_dns_endpoint_at(dst, bpf_htons(dport));
		if (!owner)
			return EGR_DNS_NOT_DNS;
		if (!nsegments && st && (st->flags & EGR_SOCK_DNS_REDIRECTED) &&
		    st->sandbox_id == owner->sandbox_id && sb->sandbox_id == owner->sandbox_id)
			return EGR_DNS_REDIRECTED;
	}
	egr_count(EGR_STAT_DNS_DENY);
	return EGR_DNS_REFUSED;
}

#endif
