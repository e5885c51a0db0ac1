/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* egressd's kernel data path: thin SEC() wrappers over bpf/lib/.  Attached at
 * the cgroup2 root with bpf_link (multi-attach), so every cgroup is seen and
 * the sandbox lookup decides what applies. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "lib/sock_addr.h"
#include "lib/backstop.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

SEC("cgroup/connect4")
int egr_connect4(struct bpf_sock_addr *ctx)
{
	return egr_sock_addr_decide(ctx, 1, 1);
}

SEC("cgroup/connect6")
int egr_connect6(struct bpf_sock_addr *ctx)
{
	return egr_sock_addr_decide(ctx, 0, 1);
}

SEC("cgroup/sendmsg4")
int egr_sendmsg4(struct bpf_sock_addr *ctx)
{
	return egr_sock_addr_decide(ctx, 1, 0);
}

SEC("cgroup/sendmsg6")
int egr_sendmsg6(struct bpf_sock_addr *ctx)
{
	return egr_sock_addr_decide(ctx, 0, 0);
}

SEC("cgroup_skb/egress")
int egr_skb_egress(struct __sk_buff *skb)
{
	return egr_backstop(skb);
}
