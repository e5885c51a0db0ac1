/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* How flows use learned addresses (egr_resuse_v1), for the collector and
 * for lib/verdict.h: a connect() a learned address allowed holds it until
 * the socket is released or connects elsewhere, and a send it allowed
 * keeps it for its keep_s after.  The proxy never writes these records, so
 * its read-modify-write of egr_resolved_v2 cannot lose a count. */
#ifndef EGRESSD_BPF_LIB_RESOLVED_USE_H
#define EGRESSD_BPF_LIB_RESOLVED_USE_H

#include "lib/maps.h"
#include "lib/addr.h"

/* EGR_USE_REFRESH_NS (maps/egressd_abi.h): a busy sender writes at most 1/s. */

static __always_inline struct egr_resuse_val *egr_use_record(__u64 sandbox_id, const __u8 addr[16])
{
	struct egr_resolved_key k = { .sandbox_id = sandbox_id };
	struct egr_resuse_val zero = {}, *u;

	__builtin_memcpy(k.addr, addr, 16);
	u = bpf_map_lookup_elem(&egr_resuse_v1, &k);
	if (u)
		return u;
	/* A racing creator wins with its own zero: either way it exists. */
	bpf_map_update_elem(&egr_resuse_v1, &k, &zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(&egr_resuse_v1, &k);
}

/* A socket connected to a learned address: one more holder.  Called after
 * the socket's record names the destination (st->addr). */
static __always_inline void egr_use_hold(struct egr_sock_val *st)
{
	struct egr_resuse_val *u = egr_use_record(st->sandbox_id, st->addr);

	if (!u)
		return; /* map full: the flow lives, but a collection may take its address */
	__sync_fetch_and_add(&u->socks, 1);
	u->last_used_ns = bpf_ktime_get_boot_ns();
	st->flags |= EGR_SOCK_HOLDS_RESOLVED;
}

/* The socket lets go of the address it held (release, or another connect). */
static __always_inline void egr_use_drop(struct egr_sock_val *st)
{
	struct egr_resolved_key k = { .sandbox_id = st->sandbox_id };
	struct egr_resuse_val *u;

	if (!(st->flags & EGR_SOCK_HOLDS_RESOLVED))
		return;
	st->flags &= ~EGR_SOCK_HOLDS_RESOLVED;
	__builtin_memcpy(k.addr, st->addr, 16);
	u = bpf_map_lookup_elem(&egr_resuse_v1, &k);
	/* Forgotten (a policy change, an eviction) and recounted since: the
	 * count may be short of this holder; never wrap it. */
	if (u && u->socks)
		__sync_fetch_and_add(&u->socks, -1);
}

/* A send to a learned address: keeps it while the sends go on. */
static __always_inline void egr_use_send(__u64 sandbox_id, const struct egr_addr *a)
{
	struct egr_resuse_val *u = egr_use_record(sandbox_id, a->b);
	__u64 now = bpf_ktime_get_boot_ns();

	/* Not `now - stamp`: another CPU may have stamped it after `now`. */
	if (u && now >= u->last_used_ns + EGR_USE_REFRESH_NS)
		u->last_used_ns = now;
}

#endif
