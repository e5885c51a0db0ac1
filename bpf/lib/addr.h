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

/* The IPv6 forms that carry an IPv4 address a translator or tunnel reaches:
 * ::/96 (IPv4-compatible), ::ffff:0:0:0/96 (SIIT) and 64:ff9b::/96 keep it
 * in the last 32 bits; 64:ff9b:1::/48 (local-use NAT64, RFC 8215) at the
 * RFC 6052 place of whatever prefix length the operator chose: /48, /56, /64
 * or /96 (the u octet, bits 64-71, is skipped).  A hop judged here is judged
 * at every place it may sit.  Returns how many candidates it wrote to v4. */
#define EGR_MAX_EMBEDDED_V4 4
static __always_inline int egr_addr_embedded_v4(const struct egr_addr *a,
						__u32 v4[EGR_MAX_EMBEDDED_V4])
{
	const __u8 *b = a->b;
	__u8 c[4];

	if (a->w[0] == 0 && a->w[1] == 0 &&
	    (a->w[2] == 0 || a->w[2] == bpf_htonl(0xffff0000))) {
		v4[0] = a->w[3];
		return 1;
	}
	if (a->w[0] != bpf_htonl(0x0064ff9b))
		return 0;
	if (a->w[1] == 0 && a->w[2] == 0) {
		v4[0] = a->w[3];
		return 1;
	}
	if (b[4] != 0 || b[5] != 1)
		return 0;
	c[0] = b[6]; c[1] = b[7]; c[2] = b[9]; c[3] = b[10];
	__builtin_memcpy(&v4[0], c, 4);
	c[0] = b[7]; c[1] = b[9]; c[2] = b[10]; c[3] = b[11];
	__builtin_memcpy(&v4[1], c, 4);
	c[0] = b[9]; c[1] = b[10]; c[2] = b[11]; c[3] = b[12];
	__builtin_memcpy(&v4[2], c, 4);
	v4[3] = a->w[3];
	return 4;
}

/* 0.0.0.0 (::ffff:0.0.0.0) or ::. */
static __always_inline int egr_addr_is_unspecified(const struct egr_addr *a)
{
	return !a->w[0] && !a->w[1] && !a->w[3] &&
	       (a->w[2] == 0 || a->w[2] == bpf_htonl(0x0000ffff));
}

/* Connecting or sending to the unspecified address (0.0.0.0, ::,
 * ::ffff:0.0.0.0) reaches loopback: the kernel routes it there.  Named
 * destinations are put in that form before they are judged, so the
 * exemption and the protected ranges see what the kernel will really do. */
static __always_inline void egr_addr_unspecified_to_loopback(struct egr_addr *a)
{
	if (!egr_addr_is_unspecified(a))
		return;
	a->w[3] = a->w[2] ? bpf_htonl(0x7f000001) : bpf_htonl(1);
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
