/*
 * nlfloor BRIDGE HOSTVETH ALIAS NETNS_PATH IFNAME ADDR PREFIX GATEWAY
 *
 * The ADD floor: the smallest process that makes the same netlink requests as
 * academy's ADD, in the same order, and nothing else (no config, no IPAM, no
 * result, no thread: it setns()es its only thread, it never has to come back):
 *
 *   host:  GETLINK bridge, NEWADDR gateway on the bridge (EEXIST expected),
 *          NEWLINK veth (up, master, both MACs, peer born in the netns), NEWLINK alias,
 *          then the host veth's IPv6 off (/proc/sys, as academy's src/wire/quiet.rs)
 *   netns: GETLINK ifname, NEWLINK up, NEWADDR, NEWROUTE default
 *   host:  GETLINK bridge (academy re-reads it for the result),
 *          GETCHAIN ip filter FORWARD and GETCHAIN ip6 filter FORWARD in one sendmsg
 *          (does iptables' FORWARD policy drop? ENOENT on a host without
 *          iptables-nft's tables),
 *          GETLINK host veth (academy checks the pair is still its own before succeeding)
 *
 * 12 requests in 11 sends (the NEWADDR answered EEXIST included) and 1 setns. The bench traces this
 * process and one academy ADD and says DRIFT when the two counts differ, so a change to
 * academy's requests shows up here. Exit 0 on success, 1 with a message on stderr
 * otherwise.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_link.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

struct req {
	struct nlmsghdr h;
	char buf[1024];
};

static unsigned seq;

static void die(const char *what, int err)
{
	fprintf(stderr, "nlfloor: %s: %s\n", what, strerror(err));
	exit(1);
}

static struct rtattr *put(struct nlmsghdr *h, int type, const void *data, int len)
{
	struct rtattr *a = (struct rtattr *)((char *)h + NLMSG_ALIGN(h->nlmsg_len));
	a->rta_type = type;
	a->rta_len = RTA_LENGTH(len);
	if (len)
		memcpy(RTA_DATA(a), data, len);
	h->nlmsg_len = NLMSG_ALIGN(h->nlmsg_len) + RTA_ALIGN(a->rta_len);
	return a;
}

static void put_str(struct nlmsghdr *h, int type, const char *s)
{
	put(h, type, s, strlen(s) + 1);
}

static void put_u32(struct nlmsghdr *h, int type, unsigned v)
{
	put(h, type, &v, sizeof v);
}

/* Opens a nested attribute; close it with end(). */
static struct rtattr *nest(struct nlmsghdr *h, int type)
{
	return put(h, type, NULL, 0);
}

static void end(struct nlmsghdr *h, struct rtattr *a)
{
	a->rta_len = (char *)h + h->nlmsg_len - (char *)a;
}

static void start(struct req *r, int type, int flags, int family_len)
{
	memset(r, 0, sizeof *r);
	r->h.nlmsg_len = NLMSG_LENGTH(family_len);
	r->h.nlmsg_type = type;
	r->h.nlmsg_flags = NLM_F_REQUEST | flags;
	r->h.nlmsg_seq = ++seq;
}

/* One round trip. Returns 0 or a positive errno; for GETLINK, *index gets ifi_index. */
static int talk(int fd, struct req *r, int *index)
{
	if (send(fd, r, r->h.nlmsg_len, 0) < 0)
		die("send", errno);
	char buf[8192];
	ssize_t n = recv(fd, buf, sizeof buf, 0);
	if (n < 0)
		die("recv", errno);
	struct nlmsghdr *h = (struct nlmsghdr *)buf;
	if (h->nlmsg_type == NLMSG_ERROR)
		return -((struct nlmsgerr *)NLMSG_DATA(h))->error;
	if (index)
		*index = ((struct ifinfomsg *)NLMSG_DATA(h))->ifi_index;
	return 0;
}

static int nl_socket(void)
{
	int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_ROUTE);
	if (fd < 0)
		die("socket", errno);
	return fd;
}

/* The host veth's disable_ipv6, as academy writes it: best effort, like academy's. */
static void ipv6_off(const char *host)
{
	char path[128];
	snprintf(path, sizeof path, "/proc/sys/net/ipv6/conf/%s/disable_ipv6", host);
	int f = open(path, O_WRONLY | O_CLOEXEC);
	if (f >= 0) {
		if (write(f, "1", 1) < 0) {
			/* as academy: the port keeps its IPv6 */
		}
		close(f);
	}
}

/* GETCHAIN of iptables' FORWARD in `family`'s filter table, into `r`. */
static void getchain(struct req *r, int family)
{
	start(r, (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETCHAIN, 0, sizeof(struct nfgenmsg));
	struct nfgenmsg *g = NLMSG_DATA(&r->h);
	g->nfgen_family = family;
	g->version = NFNETLINK_V0;
	put_str(&r->h, NFTA_CHAIN_TABLE, "filter");
	put_str(&r->h, NFTA_CHAIN_NAME, "FORWARD");
}

/* The ip and ip6 FORWARD lookups in one sendmsg, as academy sends them, answered in
 * turn: the answers do not matter. */
static void getchains(int fd)
{
	struct req r[2];
	getchain(&r[0], NFPROTO_IPV4);
	getchain(&r[1], NFPROTO_IPV6);
	struct iovec iov[2] = {
		{ .iov_base = &r[0], .iov_len = NLMSG_ALIGN(r[0].h.nlmsg_len) },
		{ .iov_base = &r[1], .iov_len = r[1].h.nlmsg_len },
	};
	struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
	struct msghdr m = { .msg_name = &kernel, .msg_namelen = sizeof kernel, .msg_iov = iov, .msg_iovlen = 2 };
	if (sendmsg(fd, &m, 0) < 0)
		die("sendmsg", errno);
	char buf[8192];
	for (int i = 0; i < 2; i++)
		if (recv(fd, buf, sizeof buf, 0) < 0)
			die("recv", errno);
}

static int getlink(int fd, const char *name)
{
	struct req r;
	int index = 0, err;
	start(&r, RTM_GETLINK, 0, sizeof(struct ifinfomsg));
	put_str(&r.h, IFLA_IFNAME, name);
	if ((err = talk(fd, &r, &index)))
		die(name, err);
	return index;
}

static int newaddr(int fd, int index, const char *addr, int prefix)
{
	struct req r;
	start(&r, RTM_NEWADDR, NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL, sizeof(struct ifaddrmsg));
	struct ifaddrmsg *ifa = NLMSG_DATA(&r.h);
	ifa->ifa_family = AF_INET;
	ifa->ifa_prefixlen = prefix;
	ifa->ifa_index = index;
	struct in_addr a;
	inet_pton(AF_INET, addr, &a);
	put(&r.h, IFA_LOCAL, &a, 4);
	put(&r.h, IFA_ADDRESS, &a, 4);
	return talk(fd, &r, NULL);
}

static void random_mac(unsigned char mac[6])
{
	if (getrandom(mac, 6, 0) != 6)
		die("getrandom", errno);
	mac[0] = (mac[0] & 0xfe) | 0x02;
}

int main(int argc, char **argv)
{
	if (argc != 9) {
		fprintf(stderr, "usage: nlfloor BRIDGE HOSTVETH ALIAS NETNS IFNAME ADDR PREFIX GW\n");
		return 2;
	}
	const char *bridge = argv[1], *host = argv[2], *alias = argv[3], *nspath = argv[4];
	const char *ifname = argv[5], *addr = argv[6], *gw = argv[8];
	int prefix = atoi(argv[7]), err;
	struct req r;

	int ns = open(nspath, O_RDONLY | O_CLOEXEC);
	if (ns < 0)
		die(nspath, errno);
	int fd = nl_socket();

	int br = getlink(fd, bridge);
	err = newaddr(fd, br, gw, prefix);
	if (err && err != EEXIST)
		die("gateway address", err);

	unsigned char host_mac[6], peer_mac[6];
	random_mac(host_mac);
	random_mac(peer_mac);
	start(&r, RTM_NEWLINK, NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL, sizeof(struct ifinfomsg));
	struct ifinfomsg *ifi = NLMSG_DATA(&r.h);
	ifi->ifi_flags = ifi->ifi_change = IFF_UP;
	put_str(&r.h, IFLA_IFNAME, host);
	put(&r.h, IFLA_ADDRESS, host_mac, 6);
	put_u32(&r.h, IFLA_MASTER, br);
	struct rtattr *info = nest(&r.h, IFLA_LINKINFO);
	put_str(&r.h, IFLA_INFO_KIND, "veth");
	struct rtattr *data = nest(&r.h, IFLA_INFO_DATA);
	struct rtattr *peer = nest(&r.h, VETH_INFO_PEER);
	r.h.nlmsg_len += sizeof(struct ifinfomsg); /* the peer's own (zeroed) ifinfomsg */
	put_str(&r.h, IFLA_IFNAME, ifname);
	put(&r.h, IFLA_ADDRESS, peer_mac, 6);
	put_u32(&r.h, IFLA_NET_NS_FD, ns);
	end(&r.h, peer);
	end(&r.h, data);
	end(&r.h, info);
	if ((err = talk(fd, &r, NULL)))
		die("veth", err);

	start(&r, RTM_NEWLINK, NLM_F_ACK, sizeof(struct ifinfomsg));
	put_str(&r.h, IFLA_IFNAME, host);
	put_str(&r.h, IFLA_IFALIAS, alias);
	if ((err = talk(fd, &r, NULL)))
		die("alias", err);
	ipv6_off(host);

	/* A netlink socket stays in the netns it was created in: fd keeps talking to the host. */
	if (setns(ns, CLONE_NEWNET) < 0)
		die("setns", errno);
	int cfd = nl_socket();
	int idx = getlink(cfd, ifname);
	start(&r, RTM_NEWLINK, NLM_F_ACK, sizeof(struct ifinfomsg));
	ifi = NLMSG_DATA(&r.h);
	ifi->ifi_index = idx;
	ifi->ifi_flags = ifi->ifi_change = IFF_UP;
	if ((err = talk(cfd, &r, NULL)))
		die("link up", err);
	if ((err = newaddr(cfd, idx, addr, prefix)))
		die("address", err);

	start(&r, RTM_NEWROUTE, NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL, sizeof(struct rtmsg));
	struct rtmsg *rt = NLMSG_DATA(&r.h);
	rt->rtm_family = AF_INET;
	rt->rtm_table = RT_TABLE_MAIN;
	rt->rtm_protocol = RTPROT_BOOT;
	rt->rtm_scope = RT_SCOPE_UNIVERSE;
	rt->rtm_type = RTN_UNICAST;
	struct in_addr g;
	inet_pton(AF_INET, gw, &g);
	put(&r.h, RTA_GATEWAY, &g, 4);
	put_u32(&r.h, RTA_OIF, idx);
	if ((err = talk(cfd, &r, NULL)))
		die("default route", err);

	getlink(fd, bridge);
	int nf = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_NETFILTER);
	if (nf < 0)
		die("netfilter socket", errno);
	getchains(nf);
	getlink(fd, host);
	return 0;
}
