/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* Experiment, not egressd: connect4 programs that each do one piece of what
 * egr_connect4 does, so kernel.bpf_stats_enabled prices the pieces one by
 * one (bench/profile/connect4.sh attaches them all to one cgroup, multi, and
 * connects from it).  The map shapes follow maps/egressd_abi.h so the costs
 * are those of egressd's own maps: a hash of cgroup ids, socket storage of
 * egr_sock_val, a u64-keyed LPM trie of (policy, address). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "maps/egressd_abi.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EGR_MAX_CGROUPS);
	__type(key, __u64);
	__type(value, struct egr_cgroup_val);
} v_cgroups SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct egr_sock_val);
} v_sock SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, EGR_MAX_ALLOW4);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct egr_lpm4_key);
	__type(value, struct egr_allow_val);
} v_allow4 SEC(".maps");

/* The floor: entering and leaving a program, and bpf_stats' two clock reads. */
SEC("cgroup/connect4")
int v_empty(struct bpf_sock_addr *ctx)
{
	return 1;
}

/* lib/sandbox.h's walk: every ancestor id from level 1 down, a hash lookup each. */
SEC("cgroup/connect4")
int v_walk(struct bpf_sock_addr *ctx)
{
	struct egr_cgroup_val *found = NULL;

	for (int lvl = 1; lvl < EGR_MAX_CGROUP_DEPTH; lvl++) {
		__u64 id = bpf_get_current_ancestor_cgroup_id(lvl);
		struct egr_cgroup_val *v;

		if (!id)
			break;
		v = bpf_map_lookup_elem(&v_cgroups, &id);
		if (v)
			found = v;
	}
	return found ? 1 : 1;
}

/* The walk's helper calls alone, without the lookups. */
SEC("cgroup/connect4")
int v_ancestor_ids(struct bpf_sock_addr *ctx)
{
	__u64 acc = 0;

	for (int lvl = 1; lvl < EGR_MAX_CGROUP_DEPTH; lvl++) {
		__u64 id = bpf_get_current_ancestor_cgroup_id(lvl);

		if (!id)
			break;
		acc ^= id;
	}
	return acc ? 1 : 1;
}

/* A cheaper lookup: the caller's own cgroup id, one hash lookup (a cache of
 * "cgroup -> deepest registered ancestor" filled by the control plane or on a
 * miss). */
SEC("cgroup/connect4")
int v_own_cgroup(struct bpf_sock_addr *ctx)
{
	__u64 id = bpf_get_current_cgroup_id();

	return bpf_map_lookup_elem(&v_cgroups, &id) ? 1 : 1;
}

/* Socket storage created on the new socket and filled, as egr_note_socket does. */
SEC("cgroup/connect4")
int v_storage_create(struct bpf_sock_addr *ctx)
{
	struct bpf_sock *sk = ctx->sk;
	struct egr_sock_val *st;

	if (!sk)
		return 1;
	st = bpf_sk_storage_get(&v_sock, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!st)
		return 1;
	st->port = (__u16)ctx->user_port;
	st->flags = EGR_SOCK_ACTIVE | EGR_SOCK_CONNECTED;
	return 1;
}

/* The same storage looked up without F_CREATE: on a new socket a miss, the
 * price of the lookup alone. */
SEC("cgroup/connect4")
int v_storage_lookup(struct bpf_sock_addr *ctx)
{
	struct bpf_sock *sk = ctx->sk;

	if (!sk)
		return 1;
	return bpf_sk_storage_get(&v_sock, sk, 0, 0) ? 1 : 1;
}

/* The alternative to socket storage: a preallocated hash keyed by socket
 * cookie (no allocation on the connect path: a free-list pop).  Inserted and
 * deleted here, so the figure is the whole per-socket cost (the delete would
 * run at cgroup/sock_release in a real design). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EGR_MAX_CGROUPS);
	__type(key, __u64);
	__type(value, struct egr_sock_val);
} v_sock_by_cookie SEC(".maps");

SEC("cgroup/connect4")
int v_cookie_hash(struct bpf_sock_addr *ctx)
{
	struct egr_sock_val st = { .flags = EGR_SOCK_ACTIVE | EGR_SOCK_CONNECTED };
	__u64 cookie = bpf_get_socket_cookie(ctx);

	st.port = (__u16)ctx->user_port;
	bpf_map_update_elem(&v_sock_by_cookie, &cookie, &st, BPF_NOEXIST);
	bpf_map_delete_elem(&v_sock_by_cookie, &cookie);
	return 1;
}

/* The netns cookie and the destination read (egr_in_foreign_netns). */
SEC("cgroup/connect4")
int v_netns_cookie(struct bpf_sock_addr *ctx)
{
	return bpf_get_netns_cookie(ctx) ^ ctx->user_ip4 ? 1 : 1;
}

/* One LPM lookup of the destination under policy 1 (egr_v4_allowed). */
SEC("cgroup/connect4")
int v_lpm(struct bpf_sock_addr *ctx)
{
	struct egr_lpm4_key k = { .prefixlen = 64, .policy_id = bpf_htonl(1u) };
	__u32 ip = ctx->user_ip4;

	__builtin_memcpy(k.addr, &ip, 4);
	return bpf_map_lookup_elem(&v_allow4, &k) ? 1 : 1;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
