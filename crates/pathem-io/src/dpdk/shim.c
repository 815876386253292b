/*
 * pathem's DPDK shim: the only C in pathem, compiled only with the `dpdk` feature.
 *
 * It wraps what Rust cannot call directly (DPDK's inline functions: rx/tx burst, mbuf data
 * access, mempool counts) and flattens set-up into a few calls with plain arguments, so the
 * Rust side never needs the layout of a DPDK structure. It is also the one module where DPDK
 * versions differ (22.11 LTS and later).
 */
/* rte_eth_read_clock is still experimental in 22.11. */
#define ALLOW_EXPERIMENTAL_API 1

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <rte_dev.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_log.h>
#include <rte_mbuf.h>
#include <rte_mbuf_dyn.h>
#include <rte_memcpy.h>
#include <rte_mempool.h>
#include <rte_version.h>

#if RTE_VERSION < RTE_VERSION_NUM(22, 11, 0, 0)
#error "pathem needs DPDK 22.11 or newer"
#endif

/* Everything the Rust side learns about a started port. */
struct pathem_port_info {
    uint16_t port_id;
    int socket;
    uint32_t speed_mbps;
    /* Rx timestamps: 1 when the PMD stamps frames (the mbuf dynamic field). */
    int rx_timestamps;
    int ts_offset;
    uint64_t ts_flag;
    uint16_t rx_desc;
    uint16_t tx_desc;
    uint32_t pool_size;
    uint32_t data_room;
    char driver[64];
    uint16_t rx_queues;
};

/* One received frame, as Rust sees it. */
struct pathem_rx {
    const uint8_t *data;
    uint32_t len;      /* bytes at data */
    uint32_t pkt_len;  /* the frame's length */
    uint64_t stamp;    /* device timestamp (when stamped) */
    uint32_t stamped;  /* 1 when the driver stamped the frame */
    uint32_t pad;
};

const char *pathem_dpdk_strerror(int e) { return rte_strerror(e); }

/* EAL initialisation; logs go to standard error (DPDK's default is standard output). */
/* Ports whose promiscuity pathem turned on. */
static uint8_t promisc_set[RTE_MAX_ETHPORTS];

int pathem_dpdk_eal_init(int argc, char **argv)
{
    rte_openlog_stream(stderr);
    int r = rte_eal_init(argc, argv);
    return r < 0 ? -rte_errno : r;
}

/* Registers the calling thread with EAL so that it gets an lcore id (and mempool caches).
 * 0 on success or when it already has one. */
int pathem_dpdk_thread_register(void)
{
    if (rte_lcore_id() != LCORE_ID_ANY)
        return 0;
    return rte_thread_register() < 0 ? -rte_errno : 0;
}

/* Gives the calling thread's lcore id back (a thread that registered, as it ends). */
void pathem_dpdk_thread_unregister(void)
{
    if (rte_lcore_id() != LCORE_ID_ANY)
        rte_thread_unregister();
}

/* The port named `name` (a PCI address or a vdev name), or -ENODEV. */
int pathem_dpdk_port_by_name(const char *name, uint16_t *port)
{
    return rte_eth_dev_get_port_by_name(name, port) == 0 ? 0 : -ENODEV;
}

int pathem_dpdk_port_valid(uint16_t port) { return rte_eth_dev_is_valid_port(port); }

uint16_t pathem_dpdk_port_count(void) { return rte_eth_dev_count_avail(); }

/* Hot-plugs a device (`net_af_packet0,iface=eth1` or a PCI address with arguments). */
int pathem_dpdk_probe(const char *devargs)
{
    int r = rte_dev_probe(devargs);
    return r < 0 ? r : 0;
}

/* Removes a hot-plugged device from its bus (so that it can be probed again later). */
int pathem_dpdk_remove(const char *bus, const char *name)
{
    return rte_eal_hotplug_remove(bus, name);
}

/* Writes every byte of an mbuf's buffer (for rte_mempool_obj_iter). */
static void touch_mbuf(struct rte_mempool *mp, void *opaque, void *obj, unsigned idx)
{
    (void)mp;
    (void)opaque;
    (void)idx;
    struct rte_mbuf *m = obj;
    memset(m->buf_addr, 0, m->buf_len);
}

/* Configures the rx queues and one tx queue, creates the port's mempool (`n_mbufs` for one rx
 * queue, one more ring's worth for each further one) and starts the port. The drivers on a
 * kernel interface (net_af_xdp, net_af_packet) get every rx queue their arguments made
 * (queue_count=, qpairs=), each a socket that sees part of the interface's frames, and are
 * refused with more than `max_rx_queues` (no queue is left unread); other devices get one,
 * which receives everything while RSS is off. Negative errno on failure, with `why` naming
 * the step. */

int pathem_dpdk_port_start(uint16_t port, uint32_t n_mbufs, uint32_t max_frame,
                           uint16_t rx_desc, uint16_t tx_desc, uint16_t max_rx_queues,
                           int want_timestamps,
                           struct rte_mempool **pool_out, struct pathem_port_info *info,
                           const char **why)
{
    struct rte_eth_dev_info dev;
    struct rte_eth_conf conf;
    char name[RTE_MEMPOOL_NAMESIZE];
    int r;

    memset(info, 0, sizeof(*info));
    *pool_out = NULL;
    r = rte_eth_dev_info_get(port, &dev);
    if (r != 0) {
        *why = "rte_eth_dev_info_get";
        return r;
    }
    info->port_id = port;
    info->socket = rte_eth_dev_socket_id(port);
    if (info->socket < 0)
        info->socket = (int)rte_socket_id();
    snprintf(info->driver, sizeof(info->driver), "%s", dev.driver_name ? dev.driver_name : "?");

    memset(&conf, 0, sizeof(conf));
    if (want_timestamps && (dev.rx_offload_capa & RTE_ETH_RX_OFFLOAD_TIMESTAMP))
        conf.rxmode.offloads |= RTE_ETH_RX_OFFLOAD_TIMESTAMP;
    if (dev.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE)
        conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE;
    uint16_t nb_rx = 1;
    if (dev.driver_name && (strcmp(dev.driver_name, "net_af_xdp") == 0 ||
                            strcmp(dev.driver_name, "net_af_packet") == 0) &&
        dev.max_rx_queues > 1)
        nb_rx = dev.max_rx_queues;
    if (nb_rx > max_rx_queues) {
        *why = "more receive queues than pathem reads (give fewer with qpairs= or queue_count=)";
        return -E2BIG;
    }
    info->rx_queues = nb_rx;
    r = rte_eth_dev_configure(port, nb_rx, 1, &conf);
    if (r != 0) {
        *why = "rte_eth_dev_configure";
        return r;
    }
    /* Frames up to max_frame: raise the MTU where the device allows (a failure leaves the
     * device's own limit, and longer frames are the NIC's drops). */
    if (max_frame > RTE_ETHER_MAX_LEN) {
        uint32_t mtu = max_frame - RTE_ETHER_HDR_LEN - RTE_ETHER_CRC_LEN;
        uint32_t cap = dev.max_rx_pktlen > RTE_ETHER_HDR_LEN + RTE_ETHER_CRC_LEN
                           ? dev.max_rx_pktlen - RTE_ETHER_HDR_LEN - RTE_ETHER_CRC_LEN
                           : 0;
        if (dev.max_mtu && mtu > dev.max_mtu)
            mtu = dev.max_mtu;
        if (mtu > cap)
            mtu = cap;
        if (mtu > RTE_ETHER_MTU)
            (void)rte_eth_dev_set_mtu(port, (uint16_t)mtu);
    }
    r = rte_eth_dev_adjust_nb_rx_tx_desc(port, &rx_desc, &tx_desc);
    if (r != 0) {
        *why = "rte_eth_dev_adjust_nb_rx_tx_desc";
        return r;
    }
    info->rx_desc = rx_desc;
    info->tx_desc = tx_desc;

    /* One segment holds the longest frame the device delivers: pathem's longest, or the
     * device's if smaller (net_af_xdp's mbufs must fit in a page of its UMEM); at least
     * DPDK's default room, which drivers such as net_af_packet need for their own frames. */
    uint32_t data_room = max_frame;
    if (dev.max_rx_pktlen && data_room > dev.max_rx_pktlen)
        data_room = dev.max_rx_pktlen;
    if (data_room < RTE_MBUF_DEFAULT_DATAROOM)
        data_room = RTE_MBUF_DEFAULT_DATAROOM;
    if (data_room > UINT16_MAX - RTE_PKTMBUF_HEADROOM)
        data_room = UINT16_MAX - RTE_PKTMBUF_HEADROOM;
    info->data_room = data_room;

    snprintf(name, sizeof(name), "pathem_%u", port);
    n_mbufs += (uint32_t)(nb_rx - 1) * rx_desc;
    *pool_out = rte_pktmbuf_pool_create(name, n_mbufs, 256, 0,
                                        (uint16_t)(data_room + RTE_PKTMBUF_HEADROOM), info->socket);
    if (*pool_out == NULL) {
        *why = "rte_pktmbuf_pool_create (not enough memory: more hugepages, or -m with --no-huge)";
        return -rte_errno;
    }
    info->pool_size = (*pool_out)->size;
    /* Every page of every mbuf written now (memory without hugepages is mapped as it is first
     * written), so the data path takes no page fault: as pathem's delay line does. */
    rte_mempool_obj_iter(*pool_out, touch_mbuf, NULL);
    for (uint16_t q = 0; q < nb_rx; q++) {
        r = rte_eth_rx_queue_setup(port, q, rx_desc, info->socket, NULL, *pool_out);
        if (r != 0) {
            *why = "rte_eth_rx_queue_setup";
            return r;
        }
    }
    r = rte_eth_tx_queue_setup(port, 0, tx_desc, info->socket, NULL);
    if (r != 0) {
        *why = "rte_eth_tx_queue_setup";
        return r;
    }
    if (conf.rxmode.offloads & RTE_ETH_RX_OFFLOAD_TIMESTAMP) {
        if (rte_mbuf_dyn_rx_timestamp_register(&info->ts_offset, &info->ts_flag) == 0)
            info->rx_timestamps = 1;
    }
    r = rte_eth_dev_start(port);
    if (r != 0) {
        *why = "rte_eth_dev_start";
        return r;
    }
    /* Promiscuous for the run; turned off again at close where it was off (a virtual device
     * on a kernel interface changes that interface's flags). */
    if (rte_eth_promiscuous_get(port) == 0 && rte_eth_promiscuous_enable(port) == 0)
        promisc_set[port] = 1;

    struct rte_eth_link link;
    memset(&link, 0, sizeof(link));
    if (rte_eth_link_get_nowait(port, &link) == 0 && link.link_speed != RTE_ETH_SPEED_NUM_UNKNOWN)
        info->speed_mbps = link.link_speed;
    return 0;
}

/* Leaves the port's promiscuity on at close: its kernel interface was promiscuous before the
 * port started (the driver's flag starts off whatever the interface's is). */
void pathem_dpdk_promisc_keep(uint16_t port)
{
    if (port < RTE_MAX_ETHPORTS)
        promisc_set[port] = 0;
}

/* Stops and closes the port, turning off the promiscuity it turned on. */
void pathem_dpdk_port_close(uint16_t port)
{
    if (port < RTE_MAX_ETHPORTS && promisc_set[port]) {
        (void)rte_eth_promiscuous_disable(port);
        promisc_set[port] = 0;
    }
    (void)rte_eth_dev_stop(port);
    (void)rte_eth_dev_close(port);
}

void pathem_dpdk_pool_free(struct rte_mempool *pool) { rte_mempool_free(pool); }

uint32_t pathem_dpdk_pool_in_use(const struct rte_mempool *pool)
{
    return rte_mempool_in_use_count(pool);
}

/* Receives up to n frames of rx queue `queue` into m[] and describes each in out[]. A frame
 * spread over several segments is gathered into bounce + i * bounce_each (at most bounce_each
 * bytes of it). */
uint16_t pathem_dpdk_rx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **m, uint16_t n,
                              struct pathem_rx *out, uint8_t *bounce, uint32_t bounce_each,
                              int ts_offset, uint64_t ts_flag)
{
    uint16_t got = rte_eth_rx_burst(port, queue, m, n);
    for (uint16_t i = 0; i < got; i++) {
        struct rte_mbuf *b = m[i];
        out[i].pkt_len = rte_pktmbuf_pkt_len(b);
        if (b->nb_segs == 1) {
            out[i].data = rte_pktmbuf_mtod(b, const uint8_t *);
            out[i].len = rte_pktmbuf_data_len(b);
        } else {
            uint32_t len = out[i].pkt_len < bounce_each ? out[i].pkt_len : bounce_each;
            out[i].data = rte_pktmbuf_read(b, 0, len, bounce + (size_t)i * bounce_each);
            out[i].len = out[i].data ? len : 0;
        }
        out[i].stamped = ts_flag && (b->ol_flags & ts_flag);
        out[i].stamp = out[i].stamped ? *RTE_MBUF_DYNFIELD(b, ts_offset, rte_mbuf_timestamp_t *) : 0;
    }
    return got;
}

void pathem_dpdk_free_bulk(struct rte_mbuf **m, uint32_t n) { rte_pktmbuf_free_bulk(m, n); }

/* An mbuf from `pool` with `len` bytes of data appended (at *dst), or NULL when the pool is
 * empty. The caller has checked that `len` fits an mbuf's data room (`send` refuses longer
 * frames); a length past 16 bits is refused here too, so that it can never be cut short for
 * the append while the copy writes all of it. */
static struct rte_mbuf *alloc_len(struct rte_mempool *pool, uint32_t len, char **dst)
{
    if (len > UINT16_MAX)
        return NULL;
    struct rte_mbuf *b = rte_pktmbuf_alloc(pool);
    if (b == NULL)
        return NULL;
    *dst = rte_pktmbuf_append(b, (uint16_t)len);
    if (*dst == NULL) {
        rte_pktmbuf_free(b);
        return NULL;
    }
    return b;
}

/* An mbuf from `pool` holding a copy of data[0..len], or NULL when the pool is empty. */
struct rte_mbuf *pathem_dpdk_tx_copy(struct rte_mempool *pool, const uint8_t *data, uint32_t len)
{
    char *dst;
    struct rte_mbuf *b = alloc_len(pool, len, &dst);
    if (b != NULL)
        rte_memcpy(dst, data, len);
    return b;
}

/* A filler frame from `pool`: `hdr` (14 bytes) then zeros, `len` bytes in all (len >= 14),
 * or NULL when the pool is empty. */
struct rte_mbuf *pathem_dpdk_tx_filler(struct rte_mempool *pool, const uint8_t *hdr, uint32_t len)
{
    char *dst;
    struct rte_mbuf *b = alloc_len(pool, len, &dst);
    if (b != NULL) {
        memcpy(dst, hdr, 14);
        memset(dst + 14, 0, len - 14);
    }
    return b;
}

/* Asks the driver to free the mbufs of frames it has sent (a pool found empty may only be
 * refilled so; drivers without it say -ENOTSUP, which is fine). */
void pathem_dpdk_tx_cleanup(uint16_t port) { (void)rte_eth_tx_done_cleanup(port, 0, 0); }

uint16_t pathem_dpdk_tx_burst(uint16_t port, struct rte_mbuf **m, uint16_t n)
{
    return rte_eth_tx_burst(port, 0, m, n);
}

/* ipackets, imissed, ierrors, rx_nombuf, opackets, oerrors. */
int pathem_dpdk_stats(uint16_t port, uint64_t out[6])
{
    struct rte_eth_stats s;
    int r = rte_eth_stats_get(port, &s);
    if (r != 0)
        return r;
    out[0] = s.ipackets;
    out[1] = s.imissed;
    out[2] = s.ierrors;
    out[3] = s.rx_nombuf;
    out[4] = s.opackets;
    out[5] = s.oerrors;
    return 0;
}

int pathem_dpdk_read_clock(uint16_t port, uint64_t *clock) { return rte_eth_read_clock(port, clock); }

/* The receive timestamp's dynamic field and flag, where a driver registered them without the
 * offload being asked for (net_pcap stamps every frame with its capture time): 0 when both
 * exist. */
int pathem_dpdk_rx_stamp_field(int *offset, uint64_t *flag)
{
    int off = rte_mbuf_dynfield_lookup(RTE_MBUF_DYNFIELD_TIMESTAMP_NAME, NULL);
    int bit = rte_mbuf_dynflag_lookup(RTE_MBUF_DYNFLAG_RX_TIMESTAMP_NAME, NULL);
    if (off < 0 || bit < 0)
        return -1;
    *offset = off;
    *flag = UINT64_C(1) << bit;
    return 0;
}
