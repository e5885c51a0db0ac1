/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* Reads what a packet really asks the network to do: its header destination,
 * its destination port, and every hop of an IPv6 routing header.  l3_off is
 * where the network header starts in the skb: 0 for cgroup_skb programs,
 * ETH_HLEN for tc at L2.  Every offset the parser returns (rh_offset) counts
 * from the start of the skb, so callers load from it as it is. */
#ifndef EGRESSD_BPF_LIB_PACKET_H
#define EGRESSD_BPF_LIB_PACKET_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "lib/addr.h"

#define EGR_ETH_P_IP 0x0800
#define EGR_ETH_P_IPV6 0x86DD
#define EGR_IPOPT_LSRR 131
#define EGR_IPOPT_SSRR 137
/* IPv6 next-header values (uapi #defines, so absent from vmlinux.h BTF). */
#define EGR_NEXTHDR_HOP 0
#define EGR_NEXTHDR_ROUTING 43
#define EGR_NEXTHDR_FRAGMENT 44
#define EGR_NEXTHDR_AUTH 51
#define EGR_NEXTHDR_DEST 60
/* Routing header types whose hops are plain 16-byte addresses. */
#define EGR_RH_TYPE0 0 /* deprecated source route (RFC 5095) */
#define EGR_RH_TYPE2 2 /* Mobile IPv6: one home address */
#define EGR_RH_SRH 4   /* segment routing (RFC 8754) */
/* Headers walked, the upper-layer one included: 5 extension headers pass, a
 * sixth is refused. */
#define EGR_MAX_V6_EXT_HDRS 6
#define EGR_MAX_RH_SEGMENTS 8

struct egr_pkt {
	struct egr_addr dst;
	__u16 dport;     /* host order; 0 when the packet has none */
	__u8 l4proto;
	__u8 nsegments;  /* IPv6 routing header addresses to judge too */
	__u32 rh_offset; /* where those addresses start (from the skb's start) */
	__u8 opens_tcp;  /* TCP SYN without ACK, or a TCP header too short to tell */
	__u8 ports_read; /* the L4 ports were in the packet (not a later fragment) */
	__u8 tcp_flags;  /* TCP: the flags byte (FIN 0x01, SYN 0x02, RST 0x04, ACK 0x10) */
	__u16 sport;     /* host order; what the tc flow table keys on */
	__u8 later_fragment; /* a fragment past the first: no upper-layer header */
	__u32 l4_off;    /* where the upper-layer header starts (from the skb's start) */
};


enum egr_parse {
	EGR_PARSE_OK = 0,
	EGR_PARSE_NOT_IP,    /* neither IPv4 nor IPv6: no destination to judge */
	EGR_PARSE_REFUSE,    /* malformed, too deep or IPv4 source-routed */
};

static __always_inline int egr_l4_has_ports(__u8 proto)
{
	return proto == IPPROTO_TCP || proto == IPPROTO_UDP ||
	       proto == IPPROTO_UDPLITE || proto == IPPROTO_SCTP ||
	       proto == IPPROTO_DCCP;
}

/* A first fragment must carry its whole header chain (RFC 7112): a port-
 * bearing protocol whose ports are not in the packet is malformed, refused. */
static __always_inline int egr_load_dport(struct __sk_buff *skb, __u32 off, struct egr_pkt *p)
{
	__u16 ports[2];

	if (!egr_l4_has_ports(p->l4proto))
		return EGR_PARSE_OK;
	if (bpf_skb_load_bytes(skb, off, ports, sizeof(ports)))
		return EGR_PARSE_REFUSE;
	p->dport = bpf_ntohs(ports[1]);
	p->sport = bpf_ntohs(ports[0]);
	p->ports_read = 1;
	if (p->l4proto == IPPROTO_TCP) {
		__u8 flags = 0x02; /* unreadable flags count as an open: no shortcut */

		bpf_skb_load_bytes(skb, off + 13, &flags, 1);
		p->opens_tcp = (flags & 0x12) == 0x02; /* SYN, not ACK */
		p->tcp_flags = flags;
	}
	return EGR_PARSE_OK;
}

/* IPv4 loose/strict source routing asks hosts on the path to forward to
 * addresses the header does not show.  It is obsolete (RFC 7126 says drop
 * it), so a sandbox's source-routed packet is refused outright. */
static __always_inline int egr_ipv4_source_routed(struct __sk_buff *skb, __u32 l3_off,
						  __u32 hdr_len)
{
	__u8 opts[40] = {}; /* nothing below reads a byte it did not load */
	__u32 olen = hdr_len - 20;

	if (olen == 0)
		return 0;
	if (olen > sizeof(opts))
		return 1;
	/* Options come in 32-bit words: load word by word (constant sizes). */
	for (__u32 w = 0; w < sizeof(opts) / 4; w++) {
		if (w * 4 >= olen)
			break;
		if (bpf_skb_load_bytes(skb, l3_off + 20 + w * 4, &opts[w * 4], 4))
			return 1;
	}
	/* Walk option starts with a constant-bounded index (the verifier
	 * refuses a stack index it cannot bound). */
	__u32 next = 0;

	for (__u32 i = 0; i < sizeof(opts) - 1; i++) {
		__u8 type;

		if (i >= olen)
			break;
		if (i != next)
			continue;
		type = opts[i];
		if (type == 0) /* end of options */
			break;
		if (type == 1) { /* no-op */
			next = i + 1;
			continue;
		}
		if (type == EGR_IPOPT_LSRR || type == EGR_IPOPT_SSRR)
			return 1;
		/* A type without its length byte, a length below 2 or one that
		 * runs past the options is malformed: refused, as unparseable. */
		if (i + 1 >= olen || opts[i + 1] < 2 || i + opts[i + 1] > olen)
			return 1;
		next = i + opts[i + 1];
	}
	return 0;
}

static __always_inline int egr_parse_ipv4(struct __sk_buff *skb, __u32 l3_off, struct egr_pkt *p)
{
	struct iphdr iph;
	__u32 hdr_len;

	if (bpf_skb_load_bytes(skb, l3_off, &iph, sizeof(iph)))
		return EGR_PARSE_REFUSE;
	hdr_len = iph.ihl * 4;
	if (hdr_len < 20)
		return EGR_PARSE_REFUSE;
	if (egr_ipv4_source_routed(skb, l3_off, hdr_len))
		return EGR_PARSE_REFUSE;
	egr_addr_from_v4(&p->dst, iph.daddr);
	p->l4proto = iph.protocol;
	p->l4_off = l3_off + hdr_len;
	if ((bpf_ntohs(iph.frag_off) & 0x1fff) == 0) /* first fragment only */
		return egr_load_dport(skb, l3_off + hdr_len, p);
	p->later_fragment = 1;
	return EGR_PARSE_OK;
}

static __always_inline int egr_parse_ipv6(struct __sk_buff *skb, __u32 l3_off, struct egr_pkt *p)
{
	struct ipv6hdr ip6;
	__u32 off = l3_off + sizeof(ip6);
	__u8 next;
	int first_fragment = 1;

	if (bpf_skb_load_bytes(skb, l3_off, &ip6, sizeof(ip6)))
		return EGR_PARSE_REFUSE;
	__builtin_memcpy(p->dst.b, &ip6.daddr, 16);
	next = ip6.nexthdr;

	for (int i = 0; i < EGR_MAX_V6_EXT_HDRS; i++) {
		__u8 h[4];

		switch (next) {
		case EGR_NEXTHDR_HOP:
		case EGR_NEXTHDR_DEST:
			if (bpf_skb_load_bytes(skb, off, h, 2))
				return EGR_PARSE_REFUSE;
			next = h[0];
			off += (h[1] + 1) * 8;
			continue;
		case EGR_NEXTHDR_ROUTING:
			/* next, hdr ext len, routing type, segments left */
			if (p->nsegments || bpf_skb_load_bytes(skb, off, h, 4))
				return EGR_PARSE_REFUSE; /* two routing headers */
			/* Types 0 and 4 carry hdr_len/2 addresses after 8 bytes;
			 * type 2 carries one.  Judge them all, whatever segments
			 * left says: a hop is a destination.  Any other type
			 * (RPL's compressed type 3, whatever comes next) keeps
			 * its hops in a form read here as something else, so it
			 * is refused rather than misread. */
			if (h[2] != EGR_RH_TYPE0 && h[2] != EGR_RH_TYPE2 && h[2] != EGR_RH_SRH)
				return EGR_PARSE_REFUSE;
			p->nsegments = h[2] == EGR_RH_TYPE2 ? 1 : h[1] / 2;
			if (p->nsegments == 0 || p->nsegments > EGR_MAX_RH_SEGMENTS)
				return EGR_PARSE_REFUSE;
			p->rh_offset = off + 8;
			next = h[0];
			off += (h[1] + 1) * 8;
			continue;
		case EGR_NEXTHDR_FRAGMENT:
			if (bpf_skb_load_bytes(skb, off, h, 4))
				return EGR_PARSE_REFUSE;
			first_fragment = ((h[2] << 8 | h[3]) & 0xfff8) == 0;
			next = h[0];
			off += 8;
			continue;
		case EGR_NEXTHDR_AUTH:
			if (bpf_skb_load_bytes(skb, off, h, 2))
				return EGR_PARSE_REFUSE;
			next = h[0];
			off += (h[1] + 2) * 4;
			continue;
		default:
			p->l4proto = next;
			p->l4_off = off;
			if (first_fragment)
				return egr_load_dport(skb, off, p);
			p->later_fragment = 1;
			return EGR_PARSE_OK;
		}
	}
	return EGR_PARSE_REFUSE; /* deeper than any legitimate packet */
}

/* skb->protocol names the network protocol for cgroup_skb and tc alike. */
static __always_inline int egr_parse_packet(struct __sk_buff *skb, __u32 l3_off,
					    struct egr_pkt *p)
{
	if (skb->protocol == bpf_htons(EGR_ETH_P_IP))
		return egr_parse_ipv4(skb, l3_off, p);
	if (skb->protocol == bpf_htons(EGR_ETH_P_IPV6))
		return egr_parse_ipv6(skb, l3_off, p);
	return EGR_PARSE_NOT_IP;
}

/* egr_parse_packet as a global function, which the verifier walks once, on
 * its own: inlined, every way through the parse (IPv4 options, each IPv6
 * extension header, fragments) reached the judge after it in a state of its
 * own, and the judge was verified once for each.  Through this wrapper the
 * judge sees one return value and a *p of unknown scalars, which it bounds
 * where it uses them.  A NULL p, which no caller passes, is refused. */
__noinline int egr_parse_packet_once(struct __sk_buff *skb, __u32 l3_off, struct egr_pkt *p)
{
	if (!p)
		return EGR_PARSE_REFUSE;
	return egr_parse_packet(skb, l3_off, p);
}

#endif
