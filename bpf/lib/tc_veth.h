/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* The tc program's judgement (issue 17): a sandbox registered by interface
 * is judged at its host-side veth, where every frame of the pod passes
 * whatever sends it (gVisor's netstack, a guest kernel, a packet socket).
 * Its ingress is the pod's egress.  The same decisions as the cgroup
 * programs (lib/verdict.h via lib/judge_once.h): protected ranges, allowed
 * CIDRs and ports, learned names, the default; there is no socket here, so
 * every packet is judged by its header alone (an unconnected sender's
 * learned-address keep applies, as to the backstop's sends). */
#ifndef EGRESSD_BPF_LIB_TC_VETH_H
#define EGRESSD_BPF_LIB_TC_VETH_H

#include "lib/maps.h"
#include "lib/addr.h"
#include "lib/packet.h"
#include "lib/decision.h"
#include "lib/verdict.h"
#include "lib/judge_once.h"
#include "lib/dns_redirect.h"
#include "lib/tc_dns.h"
#include "lib/audit_mode.h"

#define EGR_ETH_HLEN 14
#define EGR_ETH_P_ARP 0x0806
#define EGR_IPPROTO_ICMPV6 58
#define EGR_ND_ROUTER_SOLICIT 133
#define EGR_ND_ROUTER_ADVERT 134
#define EGR_ND_NEIGH_SOLICIT 135
#define EGR_ND_NEIGH_ADVERT 136
#define EGR_ND_REDIRECT 137

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EGR_MAX_IFSANDBOXES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct egr_cgroup_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_ifsbox_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, EGR_TC_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_tcstats_v2 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EGR_MAX_IFSANDBOXES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct egr_ifpod_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_ifpod_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EGR_MAX_IFADDRS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct egr_ifaddr_key);
	__type(value, struct egr_ifaddr_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_ifaddr_v1 SEC(".maps");

static __always_inline void egr_tc_count(__u32 stat)
{
	__u64 *v = bpf_map_lookup_elem(&egr_tcstats_v2, &stat);

	if (v)
		*v += 1;
}

static __always_inline const struct egr_cgroup_val *egr_sandbox_of_ifindex(__u32 ifindex)
{
	return bpf_map_lookup_elem(&egr_ifsbox_v1, &ifindex);
}

/* ICMPv6 right after the IPv6 header: neighbour discovery is the link's
 * (the pod must resolve its gateway), router advertisements and redirects
 * are a router's and never a pod's (they would re-route the node's or other
 * pods' traffic).  Returns the ICMPv6 type, or -1 when the packet is no
 * such ICMPv6 (judged by the policy like any other). */
static __always_inline int egr_tc_icmp6_type(struct __sk_buff *skb)
{
	__u8 next, type;

	if (bpf_skb_load_bytes(skb, EGR_ETH_HLEN + 6, &next, 1) || next != EGR_IPPROTO_ICMPV6)
		return -1;
	if (bpf_skb_load_bytes(skb, EGR_ETH_HLEN + 40, &type, 1))
		return -1;
	return type;
}

/* Whether the packet's upper layer is neighbour discovery (router
 * solicitation to redirect) wherever it sits: egr_tc_icmp6_type and the
 * checks on it (anti-spoofing's advertisement target, the router's messages
 * refused, the link's messages passed) read only an ICMPv6 header right
 * after the IPv6 header, but the node's kernel takes a router advertisement
 * behind destination options too.  The judge refuses, as a frame no pod
 * sends, every such message it has not passed: behind an extension header or
 * in a first fragment (RFC 4861 needs neither; RFC 6980 forbids fragments),
 * or addressed beyond the link (egr_tc_nd_leaves_link), whatever the policy
 * allows of its destination (ff02::1 under a default allow). */
static __always_inline int egr_tc_is_nd(struct __sk_buff *skb, const struct egr_pkt *p)
{
	__u8 type;

	if (p->l4proto != EGR_IPPROTO_ICMPV6 || p->later_fragment)
		return 0;
	if (bpf_skb_load_bytes(skb, p->l4_off, &type, 1))
		return 0;
	return type >= EGR_ND_ROUTER_SOLICIT && type <= EGR_ND_REDIRECT;
}

/* Whether the node would forward the pod's IPv6 packet (a neighbour
 * discovery message) off the link: a route lookup in the node's netns, as
 * the forwarding path would make it.  Multicast and link-local destinations
 * or sources (never forwarded), the node's own addresses (the gateway a pod
 * probes, the address the node solicits from) and no route come back as not
 * forwarded; a route to a host beyond the node (or a lookup that fails)
 * means the message would leave the link: refused (a solicitation addressed
 * to a host beyond the node would otherwise carry its ICMPv6 body there,
 * whatever the policy says of that host).  A subprogram of its own: the 64-byte lookup takes no room in
 * the judge's frame. */
static __noinline int egr_tc_nd_leaves_link(struct __sk_buff *skb)
{
	struct bpf_fib_lookup fib = {};
	long ret;

	if (!skb)
		return 1;
	fib.family = 10; /* AF_INET6 */
	fib.l4_protocol = EGR_IPPROTO_ICMPV6;
	fib.ifindex = skb->ifindex;
	if (bpf_skb_load_bytes(skb, EGR_ETH_HLEN + 8, fib.ipv6_src, 16) ||
	    bpf_skb_load_bytes(skb, EGR_ETH_HLEN + 24, fib.ipv6_dst, 16))
		return 1;
	ret = bpf_fib_lookup(skb, &fib, sizeof(fib), 0);
	return ret < 0 || ret == BPF_FIB_LKUP_RET_SUCCESS || ret == BPF_FIB_LKUP_RET_NO_NEIGH ||
	       ret == BPF_FIB_LKUP_RET_FRAG_NEEDED;
}

static __always_inline int egr_pod_owns(__u32 ifindex, const struct egr_addr *a)
{
	struct egr_ifaddr_key k = { .ifindex = ifindex };

	__builtin_memcpy(k.addr, a->b, 16);
	return bpf_map_lookup_elem(&egr_ifaddr_v1, &k) != NULL;
}

/* Whether the frame's sources are the pod's own (egressd_abi.h, egr_ifpod_v1):
 * a pod can neither impersonate another pod (to the DNS proxy, to a peer)
 * nor answer ARP/ND for the gateway.  1: its own, or nothing is known. */
static __always_inline int egr_tc_sources_own(struct __sk_buff *skb)
{
	__u32 ifindex = skb->ifindex;
	const struct egr_ifpod_val *pod = bpf_map_lookup_elem(&egr_ifpod_v1, &ifindex);
	struct egr_addr src = {};
	__u8 mac[6];
	__u32 ip4;

	if (!pod)
		return 1;
	if (pod->flags & EGR_IFPOD_MAC) {
		if (bpf_skb_load_bytes(skb, 6, mac, 6))
			return 0;
		for (int i = 0; i < 6; i++)
			if (mac[i] != pod->mac[i])
				return 0;
	}
	if (skb->protocol == bpf_htons(EGR_ETH_P_ARP)) {
		/* Ethernet/IPv4 ARP: sender MAC at 8, sender IP at 14. */
		if (bpf_skb_load_bytes(skb, EGR_ETH_HLEN + 14, &ip4, 4))
			return 0;
		if (pod->flags & EGR_IFPOD_MAC) {
			if (bpf_skb_load_bytes(skb, EGR_ETH_HLEN + 8, mac, 6))
				return 0;
			for (int i = 0; i < 6; i++)
				if (mac[i] != pod->mac[i])
					return 0;
		}
		if (ip4 == 0) /* an address probe (RFC 5227) claims nothing */
			return 1;
		egr_addr_from_v4(&src, ip4);
		return egr_pod_owns(ifindex, &src);
	}
	if (skb->protocol == bpf_htons(EGR_ETH_P_IP)) {
		if (bpf_skb_load_bytes(skb, EGR_ETH_HLEN + 12, &ip4, 4))
			return 0;
		egr_addr_from_v4(&src, ip4);
		return egr_pod_owns(ifindex, &src);
	}
	if (skb->protocol == bpf_htons(EGR_ETH_P_IPV6)) {
		if (bpf_skb_load_bytes(skb, EGR_ETH_HLEN + 8, src.b, 16))
			return 0;
		/* A neighbour advertisement claims its target: the pod's own
		 * only (never the gateway's, never another pod's). */
		if (egr_tc_icmp6_type(skb) == EGR_ND_NEIGH_ADVERT) {
			struct egr_addr target;

			if (bpf_skb_load_bytes(skb, EGR_ETH_HLEN + 40 + 8, target.b, 16))
				return 0;
			if (!egr_pod_owns(ifindex, &target) &&
			    !(target.b[0] == 0xfe && (target.b[1] & 0xc0) == 0x80))
				return 0;
		}
		if (src.b[0] == 0xfe && (src.b[1] & 0xc0) == 0x80) /* link-local */
			return 1;
		if (egr_addr_is_unspecified(&src)) /* duplicate address detection */
			return 1;
		return egr_pod_owns(ifindex, &src);
	}
	return 1; /* not IP nor ARP: refused by the judge anyway */
}

/* Judges one frame the pod behind the interface sends; sb is its sandbox.
 * *pp gets what the parser read (zeroed by the caller), for the flow table
 * (lib/tc_flow.h). */
static __always_inline struct egr_decision egr_tc_judge(struct __sk_buff *skb,
							const struct egr_cgroup_val *sb,
							struct egr_pkt *pp)
{
	struct egr_policy_val *pol = bpf_map_lookup_elem(&egr_policy_v1, &sb->policy_id);
	struct egr_pkt p = {};
	struct egr_decision d;
	int parsed;

	if (sb->kind != EGR_CG_SANDBOX)
		return egr_decide(EGR_DENY_DROP, EGR_REASON_CONTAINED);
	if (!egr_tc_sources_own(skb))
		return egr_decide(EGR_DENY_DROP, EGR_REASON_SPOOFED);
	if (skb->protocol == bpf_htons(EGR_ETH_P_ARP))
		return egr_decide(EGR_PASS, EGR_REASON_LINK_LOCAL);
	parsed = egr_parse_packet_once(skb, EGR_ETH_HLEN, &p);
	*pp = p;
	/* VLAN tags, MPLS, PPPoE, raw ethertypes: nothing egressd can judge
	 * leaves a pod. */
	if (parsed == EGR_PARSE_NOT_IP)
		return egr_decide(EGR_DENY_DROP, EGR_REASON_FRAME);
	if (parsed != EGR_PARSE_OK)
		return egr_deny(pol, EGR_REASON_MALFORMED);
	if (!pol)
		return egr_deny(pol, EGR_REASON_NO_POLICY);
	if (skb->protocol == bpf_htons(EGR_ETH_P_IPV6)) {
		int type = egr_tc_icmp6_type(skb);

		if (type == EGR_ND_ROUTER_ADVERT || type == EGR_ND_REDIRECT)
			return egr_decide(EGR_DENY_DROP, EGR_REASON_FRAME);
		/* On the link only: one the node would forward is refused
		 * below. */
		if ((type == EGR_ND_ROUTER_SOLICIT || type == EGR_ND_NEIGH_SOLICIT ||
		     type == EGR_ND_NEIGH_ADVERT) && !egr_tc_nd_leaves_link(skb))
			return egr_decide(EGR_PASS, EGR_REASON_LINK_LOCAL);
		if (egr_tc_is_nd(skb, &p))
			return egr_decide(EGR_DENY_DROP, EGR_REASON_FRAME);
	}
	/* The unspecified address is judged as the loopback it names; a
	 * loopback destination on a link is never the pod's own. */
	egr_addr_unspecified_to_loopback(&p.dst);
	if (egr_addr_is_loopback(&p.dst))
		return egr_deny(pol, EGR_REASON_LOOPBACK_LEAVES);
	/* Port 53 is steered to the sandbox's endpoint before any address
	 * check (a resolver may sit in a protected range); an endpoint named
	 * directly is refused (lib/tc_dns.h). */
	switch (egr_tc_dns_steer(skb, sb, &p)) {
	case EGR_TC_DNS_STEERED:
		return egr_decide(EGR_PASS, EGR_REASON_DNS_REDIRECT);
	case EGR_TC_DNS_REFUSED:
		return egr_deny(pol, EGR_REASON_DNS_REFUSED);
	default:
		break;
	}

	d = egr_judge_use_once(sb, pol, &p.dst, p.dport, EGR_RES_SEND);
	if (!egr_passes(d))
		return p.nsegments ? d : egr_audit_only(pol, d);
	for (int i = 0; i < EGR_MAX_RH_SEGMENTS; i++) {
		struct egr_addr hop;

		if (i >= p.nsegments)
			break;
		if (bpf_skb_load_bytes(skb, p.rh_offset + i * 16, hop.b, 16))
			return egr_deny(pol, EGR_REASON_MALFORMED);
		if (!egr_passes(egr_judge_once(sb, pol, &hop, p.dport)))
			return egr_deny(pol, EGR_REASON_ROUTING_HOP);
	}
	return d;
}

#endif
