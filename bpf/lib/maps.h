/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* The BPF side of maps/egressd_abi.h: map definitions.  Every map is pinned by
 * name under the loader's pin root so enforcement outlives the loader and a
 * reload reuses the maps (and their entries) instead of opening a window. */
#ifndef EGRESSD_BPF_LIB_MAPS_H
#define EGRESSD_BPF_LIB_MAPS_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "maps/egressd_abi.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EGR_MAX_CGROUPS);
	__type(key, __u64);
	__type(value, struct egr_cgroup_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_cgroups_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EGR_MAX_POLICIES);
	__type(key, __u32);
	__type(value, struct egr_policy_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_policy_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, EGR_MAX_ALLOW4);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct egr_lpm4_key);
	__type(value, struct egr_allow_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_allow4_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, EGR_MAX_ALLOW6);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct egr_lpm6_key);
	__type(value, struct egr_allow_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_allow6_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, EGR_MAX_PROT);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct egr_lpm4_key);
	__type(value, struct egr_prot_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_prot4_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, EGR_MAX_PROT);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct egr_lpm6_key);
	__type(value, struct egr_prot_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_prot6_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EGR_MAX_RESOLVED);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct egr_resolved_key);
	__type(value, struct egr_resolved_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_resolved_v2 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EGR_MAX_RESOLVED);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct egr_resolved_key);
	__type(value, struct egr_resuse_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_resuse_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct egr_sock_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_sock_v2 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EGR_MAX_DNS_ENDPOINTS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u64);
	__type(value, struct egr_dns_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_dns_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EGR_MAX_DNS_ENDPOINTS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct egr_dnsep_key);
	__type(value, struct egr_dnsep_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_dnsep_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct egr_config_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_config_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, EGR_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_stats_v3 SEC(".maps");

static __always_inline void egr_count(__u32 stat)
{
	__u64 *v = bpf_map_lookup_elem(&egr_stats_v3, &stat);

	if (v)
		*v += 1; /* per-CPU slot: no atomics needed */
}

static __always_inline const struct egr_config_val *egr_config(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&egr_config_v1, &zero);
}

#endif
