/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* onDeny reject at a sandbox's veth (issue 17).  The cgroup programs refuse a
 * call with EPERM; at tc there is no call, only a packet, so the refusal is
 * answered the way a filtering router answers it: a denied TCP segment with
 * a RST (RFC 9293 3.10.7.1: so connect() fails at once with ECONNREFUSED),
 * anything else with ICMP destination unreachable "communication
 * administratively prohibited" (type 3 code 13, RFC 1812 5.2.7.1) or
 * ICMPv6 destination unreachable "administratively prohibited" (type 1
 * code 1, RFC 4443 3.1), quoting the start of the packet (RFC 792 asks for
 * the IP header and 8 bytes; RFC 4443 as much as fits: 128 bytes here,
 * enough for any header chain the judge passes), so the pod's kernel finds
 * the socket and fails it.
 *
 * The packet is rewritten in place into its own answer and sent back out of
 * the interface it came in on, into the pod (Cilium's lib/icmp6.h does the
 * same): addresses and MACs swapped, so the answer comes from the
 * destination the pod asked for (as nftables' bridge reject does), with
 * every checksum computed in full.
 *
 * Never answered (dropped silently, RFC 1122 3.2.2 and RFC 4443 2.4(e)): an
 * ICMP error or a RST (no error about an error), a fragment past the first
 * (no header to quote or reset), a multicast or broadcast destination or
 * link-layer destination, a packet whose source is not one of the pod's own
 * addresses (egr_ifaddr_v1: an answer must never go to an address the pod
 * made up; an interface whose addresses are unknown gets no answers at all),
 * and anything past the sandbox's reply bucket (egr_tcrej_v1). */
#ifndef EGRESSD_BPF_LIB_TC_REJECT_H
#define EGRESSD_BPF_LIB_TC_REJECT_H

#include "lib/maps.h"
#include "lib/addr.h"
#include "lib/packet.h"
#include "lib/decision.h"
#include "lib/tc_veth.h"

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, EGR_MAX_IFSANDBOXES);
	__type(key, __u64);
	__type(value, struct egr_budget_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_tcrej_v1 SEC(".maps");

enum egr_tc_answer {
	EGR_TC_ANSWER_NONE = 0, /* drop, unanswered */
	EGR_TC_ANSWER_RST,
	EGR_TC_ANSWER_ICMP,
};

#define EGR_TC_REJECT_COST_NS (1000000000ull / EGR_TC_REJECT_RATE_PER_S)
#define EGR_TC_REJECT_BURST_NS (EGR_TC_REJECT_COST_NS * (EGR_TC_REJECT_BURST - 1))
/* The checksum of the quote is summed in words: a multiple of 4. */
#define EGR_TC_QUOTE_MAX EGR_TC_REJECT_QUOTE
_Static_assert(EGR_TC_QUOTE_MAX == 128, "the quote length is bounded with (len - 1) & 0x7f + 1 (egr_tc_build_icmp)");
#define EGR_IPPROTO_ICMP 1
#define EGR_TCP_FIN 0x01
#define EGR_TCP_SYN 0x02
#define EGR_TCP_RST 0x04
#define EGR_TCP_ACK 0x10
#define EGR_ICMP_DEST_UNREACH 3
#define EGR_ICMP_PKT_FILTERED 13
#define EGR_ICMPV6_DEST_UNREACH 1
#define EGR_ICMPV6_ADM_PROHIBITED 1
#define EGR_REPLY_TTL 64

/* One answer's room in the sandbox's bucket (GCRA).  The first test and the
 * atomic add keep CPUs racing on one bucket to at most one extra answer
 * each, however hard the pod floods. */
static __always_inline int egr_tc_reject_take(__u64 sandbox_id)
{
	struct egr_budget_val *b = bpf_map_lookup_elem(&egr_tcrej_v1, &sandbox_id);
	__u64 now = bpf_ktime_get_boot_ns(), tat;

	if (!b) {
		struct egr_budget_val first = { .tat_boot_ns = now + EGR_TC_REJECT_COST_NS };

		return bpf_map_update_elem(&egr_tcrej_v1, &sandbox_id, &first, BPF_NOEXIST) == 0;
	}
	tat = b->tat_boot_ns;
	if (tat < now) { /* idle long enough: the bucket is full again */
		b->tat_boot_ns = now + EGR_TC_REJECT_COST_NS;
		return 1;
	}
	if (tat - now > EGR_TC_REJECT_BURST_NS)
		return 0;
	tat = __sync_fetch_and_add(&b->tat_boot_ns, EGR_TC_REJECT_COST_NS);
	return tat < now || tat - now <= EGR_TC_REJECT_BURST_NS;
}

static __always_inline __u16 egr_csum_fold(__u64 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

/* A one's-complement sum of len bytes (a multiple of 4, at most 512) at p,
 * on top of seed. */
static __always_inline __u64 egr_csum_add(const void *p, __u32 len, __u64 seed)
{
	__s64 r = bpf_csum_diff(NULL, 0, (__be32 *)p, len, (__wsum)seed);

	return r < 0 ? 0 : (__u64)(__u32)r;
}

/* What a denied packet of the pod behind skb->ifindex gets back.  p is the
 * judge's parse of it (egr_parse_packet, EGR_ETH_HLEN). */
static __always_inline int egr_tc_answer_kind(struct __sk_buff *skb, const struct egr_pkt *p)
{
	struct egr_addr src = {};
	__u8 dmac0, b;

	if (bpf_skb_load_bytes(skb, 0, &dmac0, 1) || (dmac0 & 1))
		return EGR_TC_ANSWER_NONE; /* link-layer multicast or broadcast */
	if (p->later_fragment)
		return EGR_TC_ANSWER_NONE;
	if (skb->protocol == bpf_htons(EGR_ETH_P_IP)) {
		__u32 s4;
		__u8 d0;

		if (bpf_skb_load_bytes(skb, EGR_ETH_HLEN + 12, &s4, 4))
			return EGR_TC_ANSWER_NONE;
		egr_addr_from_v4(&src, s4);
		d0 = p->dst.b[12];
		/* multicast, class E, the broadcast address; loopback and
		 * "this network" (an answer from there is a martian) */
		if (d0 >= 224 || d0 == 127 || d0 == 0)
			return EGR_TC_ANSWER_NONE;
	} else if (skb->protocol == bpf_htons(EGR_ETH_P_IPV6)) {
		if (bpf_skb_load_bytes(skb, EGR_ETH_HLEN + 8, src.b, 16))
			return EGR_TC_ANSWER_NONE;
		if (p->dst.b[0] == 0xff || egr_addr_is_loopback(&p->dst) ||
		    egr_addr_is_unspecified(&p->dst))
			return EGR_TC_ANSWER_NONE;
	} else {
		return EGR_TC_ANSWER_NONE;
	}
	/* The pod's own address only: never an answer to a made-up source
	 * (that is also never loopback, multicast or unspecified). */
	if (!egr_pod_owns(skb->ifindex, &src))
		return EGR_TC_ANSWER_NONE;
	if (p->l4proto == IPPROTO_TCP) {
		if (bpf_skb_load_bytes(skb, p->l4_off + 13, &b, 1) || (b & EGR_TCP_RST))
			return EGR_TC_ANSWER_NONE;
		return EGR_TC_ANSWER_RST;
	}
	if (p->l4proto == EGR_IPPROTO_ICMP && skb->protocol == bpf_htons(EGR_ETH_P_IP)) {
		if (bpf_skb_load_bytes(skb, p->l4_off, &b, 1))
			return EGR_TC_ANSWER_NONE;
		/* unreachable, source quench, redirect, time exceeded,
		 * parameter problem: errors, never answered */
		if (b == 3 || b == 4 || b == 5 || b == 11 || b == 12)
			return EGR_TC_ANSWER_NONE;
	}
	if (p->l4proto == EGR_IPPROTO_ICMPV6 && skb->protocol == bpf_htons(EGR_ETH_P_IPV6)) {
		if (bpf_skb_load_bytes(skb, p->l4_off, &b, 1) || b < 128) /* < 128: an error */
			return EGR_TC_ANSWER_NONE;
	}
	return EGR_TC_ANSWER_ICMP;
}

struct egr_tc_rst4 {
	__u8 eth[EGR_ETH_HLEN];
	__u8 pad[2]; /* not written: aligns ip for its word sums */
	struct iphdr ip;
	struct tcphdr tcp;
};

struct egr_tc_rst6 {
	__u8 eth[EGR_ETH_HLEN];
	__u8 pad[2];
	struct ipv6hdr ip;
	struct tcphdr tcp;
};

/* The RST that answers the segment at p->l4_off (RFC 9293 3.10.7.1): with
 * an ACK, seq = its ack; without, seq 0 and ack = its seq + its length. */
static __always_inline int egr_tc_rst_fields(struct __sk_buff *skb, const struct egr_pkt *p,
					     __u32 l4_len, struct tcphdr *out)
{
	struct tcphdr th;
	__u32 seg_len;

	if (bpf_skb_load_bytes(skb, p->l4_off, &th, sizeof(th)))
		return -1;
	if (th.doff < 5 || th.doff * 4 > l4_len)
		return -1;
	seg_len = l4_len - th.doff * 4 + th.syn + th.fin;
	__builtin_memset(out, 0, sizeof(*out));
	out->source = th.dest;
	out->dest = th.source;
	out->doff = 5;
	out->rst = 1;
	if (th.ack) {
		out->seq = th.ack_seq;
	} else {
		out->ack = 1;
		out->ack_seq = bpf_htonl(bpf_ntohl(th.seq) + seg_len);
	}
	return 0;
}

/* Ethernet addresses swapped: back to the pod's MAC, from the node's. */
static __always_inline int egr_tc_eth_back(struct __sk_buff *skb, __u8 eth[EGR_ETH_HLEN])
{
	__u8 in[EGR_ETH_HLEN];

	if (bpf_skb_load_bytes(skb, 0, in, EGR_ETH_HLEN))
		return -1;
	__builtin_memcpy(eth, in + 6, 6);
	__builtin_memcpy(eth + 6, in, 6);
	eth[12] = in[12];
	eth[13] = in[13];
	return 0;
}

/* The IPv6 pseudo-header's sum (RFC 8200 8.1) from the answer's own
 * header: its two addresses, then the upper-layer length and next header. */
static __always_inline __u64 egr_csum_pseudo6(const struct ipv6hdr *ip, __u32 len, __u8 next,
					      __u64 seed)
{
	__be32 tail[2] = { bpf_htonl(len), bpf_htonl(next) };

	seed = egr_csum_add(&ip->saddr, 32, seed);
	return egr_csum_add(tail, sizeof(tail), seed);
}

/* Rewrites skb into the RST; 0 on success (skb is then the answer). */
static __always_inline int egr_tc_build_rst(struct __sk_buff *skb, const struct egr_pkt *p)
{
	if (skb->protocol == bpf_htons(EGR_ETH_P_IP)) {
		struct egr_tc_rst4 r = {};
		struct iphdr in;
		struct {
			__be32 saddr, daddr;
			__u8 zero, proto;
			__be16 len;
		} ph;
		__u32 tot;

		if (bpf_skb_load_bytes(skb, EGR_ETH_HLEN, &in, sizeof(in)))
			return -1;
		tot = bpf_ntohs(in.tot_len);
		if (tot < in.ihl * 4 || p->l4_off - EGR_ETH_HLEN != in.ihl * 4)
			return -1;
		if (egr_tc_eth_back(skb, r.eth) ||
		    egr_tc_rst_fields(skb, p, tot - in.ihl * 4, &r.tcp))
			return -1;
		r.ip.version = 4;
		r.ip.ihl = 5;
		r.ip.tot_len = bpf_htons(sizeof(r.ip) + sizeof(r.tcp));
		r.ip.frag_off = bpf_htons(0x4000); /* DF */
		r.ip.ttl = EGR_REPLY_TTL;
		r.ip.protocol = IPPROTO_TCP;
		r.ip.saddr = in.daddr;
		r.ip.daddr = in.saddr;
		r.ip.check = egr_csum_fold(egr_csum_add(&r.ip, sizeof(r.ip), 0));
		ph.saddr = r.ip.saddr;
		ph.daddr = r.ip.daddr;
		ph.zero = 0;
		ph.proto = IPPROTO_TCP;
		ph.len = bpf_htons(sizeof(r.tcp));
		r.tcp.check = egr_csum_fold(
			egr_csum_add(&r.tcp, sizeof(r.tcp), egr_csum_add(&ph, sizeof(ph), 0)));
		if (bpf_skb_change_tail(skb, EGR_ETH_HLEN + sizeof(r.ip) + sizeof(r.tcp), 0))
			return -1;
		if (bpf_skb_store_bytes(skb, 0, r.eth, EGR_ETH_HLEN, 0) ||
		    bpf_skb_store_bytes(skb, EGR_ETH_HLEN, &r.ip, sizeof(r.ip) + sizeof(r.tcp), 0))
			return -1;
		return 0;
	}
	{
		struct egr_tc_rst6 r = {};
		__be16 plen;
		__u32 end;

		if (bpf_skb_load_bytes(skb, EGR_ETH_HLEN + 4, &plen, 2) ||
		    bpf_skb_load_bytes(skb, EGR_ETH_HLEN + 8, &r.ip.daddr, 16) ||
		    bpf_skb_load_bytes(skb, EGR_ETH_HLEN + 24, &r.ip.saddr, 16))
			return -1;
		end = EGR_ETH_HLEN + 40 + bpf_ntohs(plen);
		if (end < p->l4_off)
			return -1;
		if (egr_tc_eth_back(skb, r.eth) || egr_tc_rst_fields(skb, p, end - p->l4_off, &r.tcp))
			return -1;
		r.ip.version = 6;
		r.ip.payload_len = bpf_htons(sizeof(r.tcp));
		r.ip.nexthdr = IPPROTO_TCP;
		r.ip.hop_limit = EGR_REPLY_TTL;
		r.tcp.check = egr_csum_fold(egr_csum_add(
			&r.tcp, sizeof(r.tcp), egr_csum_pseudo6(&r.ip, sizeof(r.tcp), IPPROTO_TCP, 0)));
		if (bpf_skb_change_tail(skb, EGR_ETH_HLEN + sizeof(r.ip) + sizeof(r.tcp), 0))
			return -1;
		if (bpf_skb_store_bytes(skb, 0, r.eth, EGR_ETH_HLEN, 0) ||
		    bpf_skb_store_bytes(skb, EGR_ETH_HLEN, &r.ip, sizeof(r.ip) + sizeof(r.tcp), 0))
			return -1;
		return 0;
	}
}

/* The ICMP error's quote is built here, not on the stack: with the judge and
 * the flow table inlined beside it, the program's combined stack would pass
 * the verifier's 512 bytes.  Per CPU, unpinned (scratch, nothing to keep);
 * tc runs in softirq, never nested on one CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct egr_tc_quote);
} egr_tcquote_v1 SEC(".maps");

struct egr_tc_icmp_hdrs {
	__u8 eth[EGR_ETH_HLEN];
	__u8 pad[2];
	union {
		struct {
			struct iphdr ip;
			__u8 icmp[8];
		} v4;
		struct {
			struct ipv6hdr ip;
			__u8 icmp[8];
		} v6;
	};
};

/* Rewrites skb into the ICMP(v6) error quoting its first bytes; 0 on
 * success. */
static __always_inline int egr_tc_build_icmp(struct __sk_buff *skb)
{
	struct egr_tc_icmp_hdrs h = {};
	__u32 zero = 0;
	struct egr_tc_quote *q = bpf_map_lookup_elem(&egr_tcquote_v1, &zero);
	__u8 *quote;
	/* 64-bit: clang compares 32-bit values on zero-extended copies,
	 * whose bounds the verifier does not carry back to the length */
	__u64 qlen, qw, hlen, ip_len;
	__u64 sum;

	if (!q)
		return -1;
	quote = q->b;
	/* zeros past the quote's length: its checksum sums whole words */
	__builtin_memset(quote, 0, EGR_TC_QUOTE_MAX);
	if (egr_tc_eth_back(skb, h.eth))
		return -1;
	/* What the packet holds of its IP datagram (a short frame's padding
	 * is not the datagram's). */
	if (skb->len <= EGR_ETH_HLEN)
		return -1;
	qlen = (__u64)skb->len - EGR_ETH_HLEN;
	if (skb->protocol == bpf_htons(EGR_ETH_P_IP)) {
		struct iphdr in;

		if (bpf_skb_load_bytes(skb, EGR_ETH_HLEN, &in, sizeof(in)))
			return -1;
		ip_len = bpf_ntohs(in.tot_len);
		h.v4.ip.saddr = in.daddr;
		h.v4.ip.daddr = in.saddr;
	} else {
		__be16 plen;

		/* the addresses straight into the answer, swapped (the stack
		 * is short: no copy of the whole header) */
		if (bpf_skb_load_bytes(skb, EGR_ETH_HLEN + 4, &plen, 2) ||
		    bpf_skb_load_bytes(skb, EGR_ETH_HLEN + 8, &h.v6.ip.daddr, 16) ||
		    bpf_skb_load_bytes(skb, EGR_ETH_HLEN + 24, &h.v6.ip.saddr, 16))
			return -1;
		ip_len = 40 + bpf_ntohs(plen);
	}
	if (ip_len < qlen)
		qlen = ip_len;
	if (qlen > EGR_TC_QUOTE_MAX)
		qlen = EGR_TC_QUOTE_MAX;
	if (qlen < 20)
		return -1;
	/* The same value again (20 <= qlen <= EGR_TC_QUOTE_MAX = 128), in a form
	 * 6.1's verifier can bound: it keeps the bound below zero of
	 * skb->len - 14 in the stack slot clang spills qlen to, and a branch's
	 * bound is lost when the slot is refilled; arithmetic's stays with it.
	 * (qlen - 1) & 0x7f + 1 is 1..128 to it.  The empty asm keeps clang from
	 * dropping a mask it can prove changes nothing. */
	qlen -= 1;
	asm volatile("" : "+r"(qlen));
	qlen = (qlen & 0x7f) + 1;
	if (bpf_skb_load_bytes(skb, EGR_ETH_HLEN, quote, qlen))
		return -1;
	/* The quote's bytes past qlen are zeros: summing up to the next word
	 * adds nothing (the quote starts at an even offset). */
	qw = (qlen + 3) & ~3ull;
	if (qw > EGR_TC_QUOTE_MAX) /* it is not: for the verifier */
		qw = EGR_TC_QUOTE_MAX;
	sum = egr_csum_add(quote, qw, 0);
	if (skb->protocol == bpf_htons(EGR_ETH_P_IP)) {
		h.v4.ip.version = 4;
		h.v4.ip.ihl = 5;
		h.v4.ip.tos = 0xc0; /* internetwork control, as the kernel's own */
		h.v4.ip.tot_len = bpf_htons(sizeof(h.v4) + qlen);
		h.v4.ip.ttl = EGR_REPLY_TTL;
		h.v4.ip.protocol = EGR_IPPROTO_ICMP;
		h.v4.ip.check = egr_csum_fold(egr_csum_add(&h.v4.ip, sizeof(h.v4.ip), 0));
		h.v4.icmp[0] = EGR_ICMP_DEST_UNREACH;
		h.v4.icmp[1] = EGR_ICMP_PKT_FILTERED;
		sum = egr_csum_add(h.v4.icmp, sizeof(h.v4.icmp), sum);
		__u16 c = egr_csum_fold(sum);
		__builtin_memcpy(&h.v4.icmp[2], &c, 2);
		hlen = sizeof(h.v4);
	} else {
		h.v6.ip.version = 6;
		h.v6.ip.payload_len = bpf_htons(sizeof(h.v6.icmp) + qlen);
		h.v6.ip.nexthdr = EGR_IPPROTO_ICMPV6;
		h.v6.ip.hop_limit = EGR_REPLY_TTL;
		h.v6.icmp[0] = EGR_ICMPV6_DEST_UNREACH;
		h.v6.icmp[1] = EGR_ICMPV6_ADM_PROHIBITED;
		sum = egr_csum_pseudo6(&h.v6.ip, sizeof(h.v6.icmp) + qlen, EGR_IPPROTO_ICMPV6, sum);
		sum = egr_csum_add(h.v6.icmp, sizeof(h.v6.icmp), sum);
		__u16 c = egr_csum_fold(sum);
		__builtin_memcpy(&h.v6.icmp[2], &c, 2);
		hlen = sizeof(h.v6);
	}
	if (bpf_skb_change_tail(skb, EGR_ETH_HLEN + hlen + qlen, 0))
		return -1;
	if (bpf_skb_store_bytes(skb, 0, h.eth, EGR_ETH_HLEN, 0))
		return -1;
	if (hlen == sizeof(h.v4)) {
		if (bpf_skb_store_bytes(skb, EGR_ETH_HLEN, &h.v4, sizeof(h.v4), 0))
			return -1;
	} else if (bpf_skb_store_bytes(skb, EGR_ETH_HLEN, &h.v6, sizeof(h.v6), 0)) {
		return -1;
	}
	if (bpf_skb_store_bytes(skb, EGR_ETH_HLEN + hlen, quote, qlen, 0))
		return -1;
	return 0;
}

enum egr_tc_rejected {
	EGR_TC_REJECTED_DROP = 0, /* drop the packet (unanswered, or the answer failed) */
	EGR_TC_REJECTED_SENT,     /* skb is now the answer: redirect it */
};

/* Turns the denied packet into its answer, if it gets one.  Counts what it
 * did (EGR_TC_STAT_REJECT_*).  The answer's checksums are complete: the
 * checksum state the sender's skb had is dropped where a helper can
 * (CHECKSUM_UNNECESSARY; a CHECKSUM_PARTIAL from the pod's veth leaves the
 * pod's kernel trusting the bytes, which are right either way).
 *
 * A global function, verified once (as lib/judge_once.h's judge): inlined
 * after the judge, its parse and builders would be verified again for every
 * decision the judge can arrive with.  The ctx and a scalar only. */
__noinline int egr_tc_reject_packet(struct __sk_buff *skb, __u64 sandbox_id)
{
	struct egr_pkt p = {};
	int kind, err;

	if (!skb || egr_parse_packet_once(skb, EGR_ETH_HLEN, &p) != EGR_PARSE_OK)
		return EGR_TC_REJECTED_DROP;
	kind = egr_tc_answer_kind(skb, &p);
	if (kind == EGR_TC_ANSWER_NONE)
		return EGR_TC_REJECTED_DROP;
	if (!egr_tc_reject_take(sandbox_id)) {
		egr_tc_count(EGR_TC_STAT_REJECT_LIMITED);
		return EGR_TC_REJECTED_DROP;
	}
	err = kind == EGR_TC_ANSWER_RST ? egr_tc_build_rst(skb, &p) : egr_tc_build_icmp(skb);
	if (err)
		return EGR_TC_REJECTED_DROP;
	bpf_csum_level(skb, BPF_CSUM_LEVEL_RESET);
	egr_tc_count(kind == EGR_TC_ANSWER_RST ? EGR_TC_STAT_REJECT_RST : EGR_TC_STAT_REJECT_ICMP);
	return EGR_TC_REJECTED_SENT;
}

static __always_inline int egr_tc_reject(struct __sk_buff *skb, const struct egr_cgroup_val *sb)
{
	return egr_tc_reject_packet(skb, sb->sandbox_id);
}

#endif
