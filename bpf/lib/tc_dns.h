/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* DNS steering at the veth (issue 17).  A pod judged at its host-side veth
 * has no socket egressd can redirect (gVisor's netstack, a guest kernel), so
 * its DNS is steered per packet instead: every UDP or TCP packet it sends to
 * port 53, whatever the address, has its destination rewritten to the
 * sandbox's own endpoint (egr_dns_v1) on the tc ingress of the node end,
 * before any address check.  The endpoint is a node address the pod's veth
 * routes to (the pod gateway), so the rewritten packet is simply delivered
 * locally by the node's routing to the proxy's socket for that endpoint:
 * no redirect to another device.  The proxy knows the sandbox from the
 * endpoint, as in the cgroup mode, and only this rewrite of this sandbox's
 * pod reaches it (a packet naming any endpoint directly is refused).
 *
 * The answer leaves the node towards the pod on the veth's egress, where
 * egr_tc_dns_restore() puts back the address and port the pod asked as its
 * source (egr_tcdns_v1, maps/egressd_abi.h): dig and glibc drop an answer
 * from any other source.  Only one resolver per (family, protocol, pod port)
 * is remembered, the last one asked, as the cgroup mode remembers one per
 * socket.  Checksums are updated incrementally (bpf_l3/l4_csum_replace: an
 * IPv4 UDP checksum of 0 stays 0, a computed 0 becomes 0xffff; a
 * CHECKSUM_PARTIAL skb gets its pseudo-header sum updated).
 *
 * Fails closed: no endpoint of the packet's family, a loopback endpoint
 * (unreachable from a veth), an endpoint owned by another sandbox, a
 * fragmented or extension-headed query (the rewrite needs the whole
 * transport header in the first packet) or a full table: the query is
 * refused, never sent on to the address it named. */
#ifndef EGRESSD_BPF_LIB_TC_DNS_H
#define EGRESSD_BPF_LIB_TC_DNS_H

#include "lib/maps.h"
#include "lib/addr.h"
#include "lib/packet.h"
#include "lib/decision.h"
#include "lib/dns_redirect.h"

#define EGR_TC_L3_OFF 14

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EGR_MAX_TCDNS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct egr_tcdns_key);
	__type(value, struct egr_tcdns_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_tcdns_v1 SEC(".maps");

enum egr_tc_dns_step {
	EGR_TC_DNS_NOT_DNS = 0, /* neither port 53 nor an endpoint: judge as usual */
	EGR_TC_DNS_STEERED,     /* rewritten to the sandbox's endpoint */
	EGR_TC_DNS_REFUSED,     /* cannot be steered, or names an endpoint */
};

/* The transport header of an unfragmented IPv4 packet or of an IPv6 packet
 * whose next header is the transport: what a rewrite may touch. */
struct egr_tc_l4 {
	struct egr_addr src, dst;
	__u32 l4_off;
	__u16 sport, dport; /* network order */
	__u8 v6;
	__u8 proto;
};

/* 1 when skb is such a UDP or TCP packet (t filled), 0 otherwise. */
static __always_inline int egr_tc_l4_read(struct __sk_buff *skb, struct egr_tc_l4 *t)
{
	__u16 ports[2];

	if (skb->protocol == bpf_htons(EGR_ETH_P_IP)) {
		struct iphdr iph;

		if (bpf_skb_load_bytes(skb, EGR_TC_L3_OFF, &iph, sizeof(iph)))
			return 0;
		if (iph.ihl < 5 || (bpf_ntohs(iph.frag_off) & 0x3fff)) /* MF or an offset */
			return 0;
		egr_addr_from_v4(&t->src, iph.saddr);
		egr_addr_from_v4(&t->dst, iph.daddr);
		t->proto = iph.protocol;
		t->l4_off = EGR_TC_L3_OFF + iph.ihl * 4;
		t->v6 = 0;
	} else if (skb->protocol == bpf_htons(EGR_ETH_P_IPV6)) {
		struct ipv6hdr ip6;

		if (bpf_skb_load_bytes(skb, EGR_TC_L3_OFF, &ip6, sizeof(ip6)))
			return 0;
		__builtin_memcpy(t->src.b, &ip6.saddr, 16);
		__builtin_memcpy(t->dst.b, &ip6.daddr, 16);
		t->proto = ip6.nexthdr;
		t->l4_off = EGR_TC_L3_OFF + sizeof(ip6);
		t->v6 = 1;
	} else {
		return 0;
	}
	if (t->proto != IPPROTO_UDP && t->proto != IPPROTO_TCP)
		return 0;
	if (bpf_skb_load_bytes(skb, t->l4_off, ports, sizeof(ports)))
		return 0;
	t->sport = ports[0];
	t->dport = ports[1];
	return 1;
}

/* The pod's slot for a port: glibc's parallel A and AAAA queries share a
 * socket, hence one slot; different ports spread over the interface's. */
static __always_inline __u32 egr_tc_dns_slot(const struct egr_tc_l4 *t, __u16 pod_port_be)
{
	__u32 h = (__u32)bpf_ntohs(pod_port_be) * 2654435761u;

	h ^= (__u32)t->proto << 24 | (__u32)t->v6 << 31;
	return (h >> 16 ^ h) & (EGR_TCDNS_SLOTS - 1);
}

/* Rewrites the packet's destination (is_dst) or source address and port,
 * with the IPv4 header checksum and the transport checksum.  0 on success. */
static __always_inline int egr_tc_dns_rewrite(struct __sk_buff *skb, const struct egr_tc_l4 *t, int is_dst,
					      const struct egr_addr *to, __u16 to_port_be)
{
	const struct egr_addr *from = is_dst ? &t->dst : &t->src;
	__u16 from_port_be = is_dst ? t->dport : t->sport;
	__u32 csum_off = t->l4_off + (t->proto == IPPROTO_TCP ? 16 : 6);
	/* UDP: a zero checksum (IPv4's "none") stays zero, and an update that
	 * computes zero stores 0xffff. */
	__u64 mangled = t->proto == IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0;
	__u32 port_off = t->l4_off + (is_dst ? 2 : 0);

	if (t->v6) {
		__u32 addr_off = EGR_TC_L3_OFF + (is_dst ? 24 : 8);
		__s64 diff = bpf_csum_diff((__be32 *)from->b, 16, (__be32 *)to->b, 16, 0);

		if (diff < 0 || bpf_l4_csum_replace(skb, csum_off, 0, (__u32)diff, BPF_F_PSEUDO_HDR | mangled))
			return -1;
		if (bpf_skb_store_bytes(skb, addr_off, to->b, 16, 0))
			return -1;
	} else {
		__u32 addr_off = EGR_TC_L3_OFF + (is_dst ? 16 : 12);

		if (bpf_l4_csum_replace(skb, csum_off, from->w[3], to->w[3], BPF_F_PSEUDO_HDR | mangled | 4) ||
		    bpf_l3_csum_replace(skb, EGR_TC_L3_OFF + 10, from->w[3], to->w[3], 4))
			return -1;
		if (bpf_skb_store_bytes(skb, addr_off, &to->w[3], 4, 0))
			return -1;
	}
	if (bpf_l4_csum_replace(skb, csum_off, from_port_be, to_port_be, mangled | 2))
		return -1;
	return bpf_skb_store_bytes(skb, port_off, &to_port_be, 2, 0) ? -1 : 0;
}

/* The endpoint of sandbox sb for the packet's family, checked to be a node
 * address a veth can reach and owned by sb.  0 when there is none. */
static __always_inline int egr_tc_dns_endpoint(const struct egr_cgroup_val *sb, int v6, struct egr_addr *ep,
					       __u16 *port_be)
{
	const struct egr_dns_val *v = bpf_map_lookup_elem(&egr_dns_v1, &sb->sandbox_id);
	const struct egr_dnsep_val *owner;

	if (!v || !v->port)
		return 0;
	if (v6)
		__builtin_memcpy(ep->b, v->addr6, 16);
	else
		egr_addr_from_v4(ep, v->addr4);
	if (egr_addr_is_unspecified(ep) || (!v6 && !v->addr4) || egr_addr_is_loopback(ep))
		return 0;
	*port_be = v->port;
	owner = egr_dns_endpoint_at(ep, v->port);
	return owner && owner->sandbox_id == sb->sandbox_id;
}

/* Ingress (the pod's egress): p is the judge's parse of the packet, after
 * the source checks.  A packet to port 53 is steered or refused; one naming
 * an endpoint directly (any sandbox's, its own too: only the rewrite may
 * reach it) is refused; anything else is not DNS. */
static __always_inline enum egr_tc_dns_step egr_tc_dns_steer(struct __sk_buff *skb, const struct egr_cgroup_val *sb,
							    const struct egr_pkt *p)
{
	struct egr_tcdns_key k = { .ifindex = skb->ifindex };
	struct egr_tcdns_val v = {};
	struct egr_tc_l4 t = {};
	struct egr_addr ep;
	__u16 ep_port_be;

	if (p->dport != EGR_DNS_PORT) {
		if (!egr_dns_endpoint_at(&p->dst, bpf_htons(p->dport)))
			return EGR_TC_DNS_NOT_DNS;
		goto refuse;
	}
	if (p->nsegments || (p->l4proto != IPPROTO_UDP && p->l4proto != IPPROTO_TCP))
		goto refuse;
	if (!egr_tc_l4_read(skb, &t) || t.dport != bpf_htons(EGR_DNS_PORT) || t.proto != p->l4proto)
		goto refuse; /* fragmented, or behind extension headers */
	if (!egr_tc_dns_endpoint(sb, t.v6, &ep, &ep_port_be))
		goto refuse;
	k.slot = egr_tc_dns_slot(&t, t.sport);
	v.sandbox_id = sb->sandbox_id;
	__builtin_memcpy(v.pod_addr, t.src.b, 16);
	__builtin_memcpy(v.orig_addr, t.dst.b, 16);
	v.pod_port = t.sport;
	v.orig_port = t.dport;
	v.protocol = t.proto;
	if (bpf_map_update_elem(&egr_tcdns_v1, &k, &v, BPF_ANY))
		goto refuse;
	if (egr_tc_dns_rewrite(skb, &t, 1, &ep, ep_port_be))
		goto refuse;
	egr_count(EGR_STAT_DNS_REDIRECT);
	return EGR_TC_DNS_STEERED;
refuse:
	egr_count(EGR_STAT_DNS_DENY);
	return EGR_TC_DNS_REFUSED;
}

/* Egress (towards the pod) of an interface of sandbox sb: a packet from an
 * endpoint gets the source the pod asked, when a note of this sandbox's pod
 * explains it; otherwise it is dropped (an endpoint talks to a pod only
 * through a steered query).  Everything else passes untouched. */
static __always_inline struct egr_decision egr_tc_dns_restore(struct __sk_buff *skb, const struct egr_cgroup_val *sb)
{
	const struct egr_dnsep_val *owner;
	const struct egr_tcdns_val *v;
	struct egr_tcdns_key k = { .ifindex = skb->ifindex };
	struct egr_tc_l4 t = {};
	struct egr_addr orig;

	if (!egr_tc_l4_read(skb, &t))
		return egr_decide(EGR_PASS, EGR_REASON_NOT_IP);
	owner = egr_dns_endpoint_at(&t.src, t.sport);
	if (!owner)
		return egr_decide(EGR_PASS, EGR_REASON_NOT_IP);
	if (owner->sandbox_id != sb->sandbox_id)
		return egr_decide(EGR_DENY_DROP, EGR_REASON_DNS_REFUSED);
	k.slot = egr_tc_dns_slot(&t, t.dport);
	v = bpf_map_lookup_elem(&egr_tcdns_v1, &k);
	if (!v || v->sandbox_id != sb->sandbox_id || v->protocol != t.proto || v->pod_port != t.dport ||
	    !egr_addr_eq(&t.dst, v->pod_addr))
		return egr_decide(EGR_DENY_DROP, EGR_REASON_DNS_REFUSED);
	__builtin_memcpy(orig.b, v->orig_addr, 16);
	if (egr_tc_dns_rewrite(skb, &t, 0, &orig, v->orig_port))
		return egr_decide(EGR_DENY_DROP, EGR_REASON_DNS_REFUSED);
	return egr_decide(EGR_PASS, EGR_REASON_DNS_REDIRECT);
}

#endif
