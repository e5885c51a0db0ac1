/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* Destination addresses in one canonical form: 16 bytes, IPv4 as
 * ::ffff:a.b.c.d.  Every path (connect4/6, sendmsg4/6, the skb backstop)
 * converts to this form first, so an IPv4-mapped IPv6 destination can never
 * be judged differently from the IPv4 address it really is. */
#ifndef EGRESSD_BPF_LIB_ADDR_H
#define EGRESSD_BPF_LIB_ADDR_H

#include "vmlinux.h"
#include <bpf/bpf_endian.h>

struct egr_addr {
	union {
		__u8 b[16];
		__u32 w[4];
	};
};

static __always_inline void egr_addr_from_v4(struct egr_addr *a, __u32 ip4_be)
{
	a->w[0] = 0;
	a->w[1] = 0;
	a->w[2] = bpf_htonl(0x0000ffff);
	a->w[3] = ip4_be;
}

static __always_inline int egr_addr_is_v4(const struct egr_addr *a)
{
	return a->w[0] == 0 && a->w[1] == 0 && a->w[2] == bpf_htonl(0x0000ffff);
}

/* 64:ff9b::/96, the well-known NAT64 prefix: the last 32 bits are an IPv4
 * address that a translator will reach, so protected IPv4 ranges apply. */
static __always_inline int egr_addr_is_nat64(const struct egr_addr *a)
{
	return a->w[0] == bpf_htonl(0x0064ff9b) && a->w[1] == 0 && a->w[2] == 0;
}

static __always_inline int egr_addr_is_loopback(const struct egr_addr *a)
{
	if (egr_addr_is_v4(a))
		return (bpf_ntohl(a->w[3]) >> 24) == 127;
	return a->w[0] == 0 && a->w[1] == 0 && a->w[2] == 0 &&
	       a->w[3] == bpf_htonl(1);
}

static __always_inline int egr_addr_eq(const struct egr_addr *a, const __u8 *b16)
{
	const __u32 *w = (const __u32 *)b16;

	return a->w[0] == w[0] && a->w[1] == w[1] && a->w[2] == w[2] &&
	       a->w[3] == w[3];
}

#endif
