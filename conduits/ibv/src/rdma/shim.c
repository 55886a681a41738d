/*
 * The C side of the libibverbs device (src/rdma/mod.rs). libibverbs' data-path calls
 * (ibv_post_send, ibv_post_recv, ibv_post_srq_recv, ibv_poll_cq) are static inline functions
 * of <infiniband/verbs.h>, and its structs (ibv_send_wr, ibv_wc, ibv_qp_attr, ...) are large
 * unions whose layout Rust should not copy. So Rust never sees a libibverbs struct: every call
 * goes through a function here that takes scalars or one of the small amnet_ibv_* structs
 * below, which Rust mirrors with #[repr(C)] and checks against the sizes and offsets exported
 * at the end of this file. Work requests and completions are translated here, field by field.
 *
 * Every int-returning function returns 0 or a positive errno value, except
 * amnet_ibv_poll_cq, which returns a count or libibverbs' negative failure value.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <infiniband/verbs.h>

/* Scatter/gather elements one send work request may carry through the shim. */
#define IBV_SHIM_MAX_SGE 4
/* Work requests translated and posted in one libibverbs call. */
#define IBV_SHIM_POST_MAX 16
/* Completions read in one libibverbs call. */
#define IBV_SHIM_POLL_MAX 32

/* One scatter/gather element. */
struct amnet_ibv_sge {
    uint64_t addr;
    uint32_t length;
    uint32_t lkey;
};

/* One send work request: what ibv_send_wr carries for an RC queue pair. */
struct amnet_ibv_swr {
    uint64_t wr_id;
    uint64_t remote_addr; /* RDMA and atomic operations */
    uint64_t compare_add; /* atomics: the compare value, or the value added */
    uint64_t swap;        /* compare-and-swap: the value written */
    uint32_t rkey;        /* RDMA and atomic operations */
    uint32_t imm_data;    /* network byte order, as ibv_send_wr carries it */
    uint32_t opcode;      /* enum ibv_wr_opcode */
    uint32_t send_flags;  /* enum ibv_send_flags */
    uint32_t num_sge;     /* at most IBV_SHIM_MAX_SGE */
    uint32_t reserved;
    struct amnet_ibv_sge sg[IBV_SHIM_MAX_SGE];
};

/* One receive work request with one scatter element. */
struct amnet_ibv_rwr {
    uint64_t wr_id;
    struct amnet_ibv_sge sge;
};

/* What Rust reads of one ibv_wc. */
struct amnet_ibv_wc {
    uint64_t wr_id;
    uint32_t status;   /* enum ibv_wc_status */
    uint32_t opcode;   /* enum ibv_wc_opcode */
    uint32_t byte_len;
    uint32_t imm_data; /* network byte order; valid when wc_flags has IBV_WC_WITH_IMM */
    uint32_t qp_num;
    uint32_t wc_flags;
    uint32_t vendor_err;
    uint32_t reserved;
};

/* What Rust reads of ibv_device_attr (negative counts read as 0). */
struct amnet_ibv_device_info {
    uint64_t max_mr_size;
    uint32_t max_qp_wr;
    uint32_t max_sge;
    uint32_t max_cqe;
    uint32_t max_srq_wr;
    uint32_t max_srq_sge;
    uint32_t atomic_cap; /* enum ibv_atomic_cap */
    uint32_t max_qp_rd_atom;
    uint32_t max_qp_init_rd_atom;
    uint32_t phys_port_cnt;
    uint32_t reserved;
};

/* What Rust reads of ibv_port_attr. */
struct amnet_ibv_port_info {
    uint32_t state;      /* enum ibv_port_state */
    uint32_t active_mtu; /* enum ibv_mtu */
    uint32_t max_msg_sz;
    uint32_t gid_tbl_len;
    uint16_t lid;
    uint8_t link_layer; /* IBV_LINK_LAYER_* */
    uint8_t reserved;
};

/* The capacities of a queue pair: asked for at creation, and what the device granted. */
struct amnet_ibv_qp_caps {
    uint32_t max_send_wr;
    uint32_t max_recv_wr;
    uint32_t max_send_sge;
    uint32_t max_recv_sge;
    uint32_t max_inline_data;
};

/* The INIT -> RTR attributes of an RC queue pair. */
struct amnet_ibv_rtr {
    uint8_t dgid[16];   /* the peer's GID, used when is_global */
    uint32_t dest_qpn;
    uint32_t rq_psn;
    uint16_t dlid;
    uint8_t port;
    uint8_t path_mtu;   /* enum ibv_mtu */
    uint8_t is_global;  /* 1: address the peer by GID (RoCE, or no LID) */
    uint8_t sgid_index;
    uint8_t hop_limit;
    uint8_t max_dest_rd_atomic;
    uint8_t min_rnr_timer;
    uint8_t reserved[3];
};

_Static_assert(sizeof(struct amnet_ibv_sge) == 16, "amnet_ibv_sge layout");
_Static_assert(sizeof(struct amnet_ibv_swr) == 56 + 16 * IBV_SHIM_MAX_SGE, "amnet_ibv_swr layout");
_Static_assert(sizeof(struct amnet_ibv_rwr) == 24, "amnet_ibv_rwr layout");
_Static_assert(sizeof(struct amnet_ibv_wc) == 40, "amnet_ibv_wc layout");
_Static_assert(sizeof(struct amnet_ibv_device_info) == 48, "amnet_ibv_device_info layout");
_Static_assert(sizeof(struct amnet_ibv_port_info) == 20, "amnet_ibv_port_info layout");
_Static_assert(sizeof(struct amnet_ibv_qp_caps) == 20, "amnet_ibv_qp_caps layout");
_Static_assert(sizeof(struct amnet_ibv_rtr) == 36, "amnet_ibv_rtr layout");

/* The errno a failed call left, or `fallback` where it left none. */
static int errno_or(int fallback) {
    return errno > 0 ? errno : fallback;
}

static uint32_t nonneg(int v) {
    return v > 0 ? (uint32_t)v : 0;
}

/* ---- Devices ---- */

/*
 * The device list, or NULL and 0 devices where the kernel has no RDMA support (ENOSYS): that
 * is a host without devices, not a failure. Freed with amnet_ibv_free_devices.
 */
int amnet_ibv_get_devices(struct ibv_device ***list, int *num) {
    errno = 0;
    *num = 0;
    *list = ibv_get_device_list(num);
    if (*list)
        return 0;
    *num = 0;
    if (errno == ENOSYS || errno == 0)
        return 0;
    return errno;
}

/* The name of device `i` of `list` (0 <= i < the list's count). */
const char *amnet_ibv_device_name(struct ibv_device *const *list, int i) {
    return ibv_get_device_name(list[i]);
}

void amnet_ibv_free_devices(struct ibv_device **list) {
    if (list)
        ibv_free_device_list(list);
}

/* Open device `i` of `list`; the context outlives the list. */
int amnet_ibv_open(struct ibv_device *const *list, int i, struct ibv_context **ctx) {
    errno = 0;
    *ctx = ibv_open_device(list[i]);
    return *ctx ? 0 : errno_or(ENODEV);
}

int amnet_ibv_close(struct ibv_context *ctx) {
    return ibv_close_device(ctx) ? errno_or(EINVAL) : 0;
}

int amnet_ibv_query_device(struct ibv_context *ctx, struct amnet_ibv_device_info *out) {
    struct ibv_device_attr a;
    memset(&a, 0, sizeof a);
    int rc = ibv_query_device(ctx, &a);
    if (rc)
        return rc > 0 ? rc : errno_or(EINVAL);
    memset(out, 0, sizeof *out);
    out->max_mr_size = a.max_mr_size;
    out->max_qp_wr = nonneg(a.max_qp_wr);
    out->max_sge = nonneg(a.max_sge);
    out->max_cqe = nonneg(a.max_cqe);
    out->max_srq_wr = nonneg(a.max_srq_wr);
    out->max_srq_sge = nonneg(a.max_srq_sge);
    out->atomic_cap = (uint32_t)a.atomic_cap;
    out->max_qp_rd_atom = nonneg(a.max_qp_rd_atom);
    out->max_qp_init_rd_atom = nonneg(a.max_qp_init_rd_atom);
    out->phys_port_cnt = a.phys_port_cnt;
    return 0;
}

int amnet_ibv_query_port(struct ibv_context *ctx, uint8_t port, struct amnet_ibv_port_info *out) {
    struct ibv_port_attr a;
    memset(&a, 0, sizeof a);
    int rc = ibv_query_port(ctx, port, &a);
    if (rc)
        return rc > 0 ? rc : errno_or(EINVAL);
    memset(out, 0, sizeof *out);
    out->state = (uint32_t)a.state;
    out->active_mtu = (uint32_t)a.active_mtu;
    out->max_msg_sz = a.max_msg_sz;
    out->gid_tbl_len = nonneg(a.gid_tbl_len);
    out->lid = a.lid;
    out->link_layer = a.link_layer;
    return 0;
}

int amnet_ibv_query_gid(struct ibv_context *ctx, uint8_t port, int index, uint8_t gid[16]) {
    union ibv_gid g;
    memset(&g, 0, sizeof g);
    errno = 0;
    if (ibv_query_gid(ctx, port, index, &g))
        return errno_or(EINVAL);
    memcpy(gid, g.raw, 16);
    return 0;
}

/* ---- Protection domain, memory regions, queues ---- */

int amnet_ibv_alloc_pd(struct ibv_context *ctx, struct ibv_pd **pd) {
    errno = 0;
    *pd = ibv_alloc_pd(ctx);
    return *pd ? 0 : errno_or(ENOMEM);
}

int amnet_ibv_dealloc_pd(struct ibv_pd *pd) {
    return ibv_dealloc_pd(pd);
}

int amnet_ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t len, uint32_t access,
                     struct ibv_mr **mr, uint32_t *lkey, uint32_t *rkey) {
    errno = 0;
    *mr = ibv_reg_mr(pd, addr, len, (int)access);
    if (!*mr)
        return errno_or(ENOMEM);
    *lkey = (*mr)->lkey;
    *rkey = (*mr)->rkey;
    return 0;
}

int amnet_ibv_dereg_mr(struct ibv_mr *mr) {
    return ibv_dereg_mr(mr);
}

/* A completion queue of at least `cqe` entries; `got` receives the depth granted. */
int amnet_ibv_create_cq(struct ibv_context *ctx, int cqe, struct ibv_cq **cq, int *got) {
    errno = 0;
    *cq = ibv_create_cq(ctx, cqe, NULL, NULL, 0);
    if (!*cq)
        return errno_or(ENOMEM);
    *got = (*cq)->cqe;
    return 0;
}

int amnet_ibv_destroy_cq(struct ibv_cq *cq) {
    return ibv_destroy_cq(cq);
}

int amnet_ibv_create_srq(struct ibv_pd *pd, uint32_t max_wr, uint32_t max_sge,
                         struct ibv_srq **srq) {
    struct ibv_srq_init_attr init;
    memset(&init, 0, sizeof init);
    init.attr.max_wr = max_wr;
    init.attr.max_sge = max_sge;
    errno = 0;
    *srq = ibv_create_srq(pd, &init);
    return *srq ? 0 : errno_or(ENOMEM);
}

int amnet_ibv_destroy_srq(struct ibv_srq *srq) {
    return ibv_destroy_srq(srq);
}

/*
 * An RC queue pair in RESET. `caps` holds what is asked for and, on success, what the device
 * granted (at least as much). With an SRQ, the receive capacities are ignored.
 */
int amnet_ibv_create_rc_qp(struct ibv_pd *pd, struct ibv_cq *send_cq, struct ibv_cq *recv_cq,
                           struct ibv_srq *srq, struct amnet_ibv_qp_caps *caps,
                           struct ibv_qp **qp, uint32_t *qp_num) {
    struct ibv_qp_init_attr init;
    memset(&init, 0, sizeof init);
    init.send_cq = send_cq;
    init.recv_cq = recv_cq;
    init.srq = srq;
    init.qp_type = IBV_QPT_RC;
    init.sq_sig_all = 0;
    init.cap.max_send_wr = caps->max_send_wr;
    init.cap.max_send_sge = caps->max_send_sge;
    init.cap.max_inline_data = caps->max_inline_data;
    if (!srq) {
        init.cap.max_recv_wr = caps->max_recv_wr;
        init.cap.max_recv_sge = caps->max_recv_sge;
    }
    errno = 0;
    *qp = ibv_create_qp(pd, &init);
    if (!*qp)
        return errno_or(ENOMEM);
    caps->max_send_wr = init.cap.max_send_wr;
    caps->max_recv_wr = init.cap.max_recv_wr;
    caps->max_send_sge = init.cap.max_send_sge;
    caps->max_recv_sge = init.cap.max_recv_sge;
    caps->max_inline_data = init.cap.max_inline_data;
    *qp_num = (*qp)->qp_num;
    return 0;
}

int amnet_ibv_destroy_qp(struct ibv_qp *qp) {
    return ibv_destroy_qp(qp);
}

/* ---- Queue-pair state machine ---- */

int amnet_ibv_qp_to_init(struct ibv_qp *qp, uint8_t port, uint32_t access) {
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = port;
    a.qp_access_flags = access;
    return ibv_modify_qp(qp, &a,
                         IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

int amnet_ibv_qp_to_rtr(struct ibv_qp *qp, const struct amnet_ibv_rtr *r) {
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = (enum ibv_mtu)r->path_mtu;
    a.dest_qp_num = r->dest_qpn;
    a.rq_psn = r->rq_psn;
    a.max_dest_rd_atomic = r->max_dest_rd_atomic;
    a.min_rnr_timer = r->min_rnr_timer;
    a.ah_attr.dlid = r->dlid;
    a.ah_attr.sl = 0;
    a.ah_attr.src_path_bits = 0;
    a.ah_attr.port_num = r->port;
    a.ah_attr.is_global = r->is_global;
    if (r->is_global) {
        memcpy(a.ah_attr.grh.dgid.raw, r->dgid, 16);
        a.ah_attr.grh.sgid_index = r->sgid_index;
        a.ah_attr.grh.hop_limit = r->hop_limit;
        a.ah_attr.grh.flow_label = 0;
        a.ah_attr.grh.traffic_class = 0;
    }
    return ibv_modify_qp(qp, &a,
                         IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                             IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

int amnet_ibv_qp_to_rts(struct ibv_qp *qp, uint32_t sq_psn, uint8_t timeout, uint8_t retry_cnt,
                        uint8_t rnr_retry, uint8_t max_rd_atomic) {
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = sq_psn;
    a.timeout = timeout;
    a.retry_cnt = retry_cnt;
    a.rnr_retry = rnr_retry;
    a.max_rd_atomic = max_rd_atomic;
    return ibv_modify_qp(qp, &a,
                         IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                             IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
}

int amnet_ibv_qp_to_err(struct ibv_qp *qp) {
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_ERR;
    return ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

/* The queue pair's state (enum ibv_qp_state) through ibv_query_qp. */
int amnet_ibv_qp_state(struct ibv_qp *qp, uint32_t *state) {
    struct ibv_qp_attr a;
    struct ibv_qp_init_attr init;
    memset(&a, 0, sizeof a);
    memset(&init, 0, sizeof init);
    int rc = ibv_query_qp(qp, &a, IBV_QP_STATE, &init);
    if (rc)
        return rc;
    *state = (uint32_t)a.qp_state;
    return 0;
}

/* ---- Data path ---- */

/* Translate send request `in` into `w` (with its elements in `sge`); 0 or EINVAL. */
static int fill_send(const struct amnet_ibv_swr *in, struct ibv_send_wr *w, struct ibv_sge *sge) {
    if (in->num_sge > IBV_SHIM_MAX_SGE)
        return EINVAL;
    memset(w, 0, sizeof *w);
    for (uint32_t j = 0; j < in->num_sge; j++) {
        sge[j].addr = in->sg[j].addr;
        sge[j].length = in->sg[j].length;
        sge[j].lkey = in->sg[j].lkey;
    }
    w->wr_id = in->wr_id;
    w->sg_list = in->num_sge ? sge : NULL;
    w->num_sge = (int)in->num_sge;
    w->send_flags = in->send_flags;
    switch (in->opcode) {
    case IBV_WR_SEND:
        break;
    case IBV_WR_SEND_WITH_IMM:
        w->imm_data = in->imm_data;
        break;
    case IBV_WR_RDMA_WRITE_WITH_IMM:
        w->imm_data = in->imm_data;
        /* fall through */
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_READ:
        w->wr.rdma.remote_addr = in->remote_addr;
        w->wr.rdma.rkey = in->rkey;
        break;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
        w->wr.atomic.remote_addr = in->remote_addr;
        w->wr.atomic.compare_add = in->compare_add;
        w->wr.atomic.swap = in->swap;
        w->wr.atomic.rkey = in->rkey;
        break;
    default:
        return EINVAL;
    }
    w->opcode = (enum ibv_wr_opcode)in->opcode;
    return 0;
}

/*
 * Post `n` send requests in order. On failure `*bad` is the index of the first request not
 * posted; those before it were.
 */
int amnet_ibv_post_send(struct ibv_qp *qp, uint32_t n, const struct amnet_ibv_swr *in,
                        uint32_t *bad) {
    struct ibv_send_wr wr[IBV_SHIM_POST_MAX];
    struct ibv_sge sge[IBV_SHIM_POST_MAX][IBV_SHIM_MAX_SGE];
    *bad = 0;
    for (uint32_t base = 0; base < n; base += IBV_SHIM_POST_MAX) {
        uint32_t k = n - base < IBV_SHIM_POST_MAX ? n - base : IBV_SHIM_POST_MAX;
        uint32_t ok = 0;
        int invalid = 0;
        for (; ok < k; ok++) {
            invalid = fill_send(&in[base + ok], &wr[ok], sge[ok]);
            if (invalid)
                break;
            wr[ok].next = NULL;
            if (ok > 0)
                wr[ok - 1].next = &wr[ok];
        }
        if (ok > 0) {
            struct ibv_send_wr *bad_wr = NULL;
            int rc = ibv_post_send(qp, wr, &bad_wr);
            if (rc) {
                ptrdiff_t at = bad_wr ? bad_wr - wr : 0;
                *bad = base + (at >= 0 && (uint32_t)at < ok ? (uint32_t)at : 0);
                return rc > 0 ? rc : EINVAL;
            }
        }
        if (invalid) {
            *bad = base + ok;
            return invalid;
        }
    }
    return 0;
}

/* Translate `k` receive requests into a chain. */
static void fill_recv(const struct amnet_ibv_rwr *in, uint32_t k, struct ibv_recv_wr *wr,
                      struct ibv_sge *sge) {
    for (uint32_t i = 0; i < k; i++) {
        sge[i].addr = in[i].sge.addr;
        sge[i].length = in[i].sge.length;
        sge[i].lkey = in[i].sge.lkey;
        wr[i].wr_id = in[i].wr_id;
        wr[i].sg_list = &sge[i];
        wr[i].num_sge = 1;
        wr[i].next = i + 1 < k ? &wr[i + 1] : NULL;
    }
}

static uint32_t bad_index(const struct ibv_recv_wr *wr, const struct ibv_recv_wr *bad_wr,
                          uint32_t k) {
    ptrdiff_t at = bad_wr ? bad_wr - wr : 0;
    return at >= 0 && (uint32_t)at < k ? (uint32_t)at : 0;
}

/* Post `n` receive requests to a queue pair; `*bad` as for amnet_ibv_post_send. */
int amnet_ibv_post_recv(struct ibv_qp *qp, uint32_t n, const struct amnet_ibv_rwr *in,
                        uint32_t *bad) {
    struct ibv_recv_wr wr[IBV_SHIM_POST_MAX];
    struct ibv_sge sge[IBV_SHIM_POST_MAX];
    *bad = 0;
    for (uint32_t base = 0; base < n; base += IBV_SHIM_POST_MAX) {
        uint32_t k = n - base < IBV_SHIM_POST_MAX ? n - base : IBV_SHIM_POST_MAX;
        struct ibv_recv_wr *bad_wr = NULL;
        fill_recv(&in[base], k, wr, sge);
        int rc = ibv_post_recv(qp, wr, &bad_wr);
        if (rc) {
            *bad = base + bad_index(wr, bad_wr, k);
            return rc > 0 ? rc : EINVAL;
        }
    }
    return 0;
}

/* Post `n` receive requests to a shared receive queue; `*bad` as above. */
int amnet_ibv_post_srq_recv(struct ibv_srq *srq, uint32_t n, const struct amnet_ibv_rwr *in,
                            uint32_t *bad) {
    struct ibv_recv_wr wr[IBV_SHIM_POST_MAX];
    struct ibv_sge sge[IBV_SHIM_POST_MAX];
    *bad = 0;
    for (uint32_t base = 0; base < n; base += IBV_SHIM_POST_MAX) {
        uint32_t k = n - base < IBV_SHIM_POST_MAX ? n - base : IBV_SHIM_POST_MAX;
        struct ibv_recv_wr *bad_wr = NULL;
        fill_recv(&in[base], k, wr, sge);
        int rc = ibv_post_srq_recv(srq, wr, &bad_wr);
        if (rc) {
            *bad = base + bad_index(wr, bad_wr, k);
            return rc > 0 ? rc : EINVAL;
        }
    }
    return 0;
}

/*
 * Move up to `n` completions into `out`; returns how many, or libibverbs' negative value when
 * the first read fails (a failure after some were read returns those).
 */
int amnet_ibv_poll_cq(struct ibv_cq *cq, int n, struct amnet_ibv_wc *out) {
    struct ibv_wc wc[IBV_SHIM_POLL_MAX];
    int got = 0;
    while (got < n) {
        int want = n - got < IBV_SHIM_POLL_MAX ? n - got : IBV_SHIM_POLL_MAX;
        int r = ibv_poll_cq(cq, want, wc);
        if (r < 0)
            return got > 0 ? got : r;
        for (int i = 0; i < r; i++) {
            struct amnet_ibv_wc *o = &out[got + i];
            o->wr_id = wc[i].wr_id;
            o->status = (uint32_t)wc[i].status;
            o->opcode = (uint32_t)wc[i].opcode;
            o->byte_len = wc[i].byte_len;
            o->imm_data = (wc[i].wc_flags & IBV_WC_WITH_IMM) ? wc[i].imm_data : 0;
            o->qp_num = wc[i].qp_num;
            o->wc_flags = wc[i].wc_flags;
            o->vendor_err = wc[i].vendor_err;
            o->reserved = 0;
        }
        got += r;
        if (r < want)
            break;
    }
    return got;
}

/* ---- What Rust checks its copies against (tests::abi_matches_the_shim) ---- */

const size_t amnet_ibv_sizeof_sge = sizeof(struct amnet_ibv_sge);
const size_t amnet_ibv_sizeof_swr = sizeof(struct amnet_ibv_swr);
const size_t amnet_ibv_offsetof_swr_rkey = offsetof(struct amnet_ibv_swr, rkey);
const size_t amnet_ibv_offsetof_swr_num_sge = offsetof(struct amnet_ibv_swr, num_sge);
const size_t amnet_ibv_offsetof_swr_sg = offsetof(struct amnet_ibv_swr, sg);
const size_t amnet_ibv_sizeof_rwr = sizeof(struct amnet_ibv_rwr);
const size_t amnet_ibv_sizeof_wc = sizeof(struct amnet_ibv_wc);
const size_t amnet_ibv_offsetof_wc_imm_data = offsetof(struct amnet_ibv_wc, imm_data);
const size_t amnet_ibv_offsetof_wc_vendor_err = offsetof(struct amnet_ibv_wc, vendor_err);
const size_t amnet_ibv_sizeof_device_info = sizeof(struct amnet_ibv_device_info);
const size_t amnet_ibv_offsetof_device_info_phys_port_cnt =
    offsetof(struct amnet_ibv_device_info, phys_port_cnt);
const size_t amnet_ibv_sizeof_port_info = sizeof(struct amnet_ibv_port_info);
const size_t amnet_ibv_offsetof_port_info_lid = offsetof(struct amnet_ibv_port_info, lid);
const size_t amnet_ibv_sizeof_qp_caps = sizeof(struct amnet_ibv_qp_caps);
const size_t amnet_ibv_sizeof_rtr = sizeof(struct amnet_ibv_rtr);
const size_t amnet_ibv_offsetof_rtr_dlid = offsetof(struct amnet_ibv_rtr, dlid);
const size_t amnet_ibv_offsetof_rtr_min_rnr_timer = offsetof(struct amnet_ibv_rtr, min_rnr_timer);

const uint32_t amnet_ibv_max_sge = IBV_SHIM_MAX_SGE;
const uint32_t amnet_ibv_post_max = IBV_SHIM_POST_MAX;
const uint32_t amnet_ibv_poll_max = IBV_SHIM_POLL_MAX;

/* libibverbs' values that Rust writes or compares (they are part of the kernel ABI). */
const uint32_t amnet_ibv_wr_values[7] = {
    IBV_WR_RDMA_WRITE,         IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_SEND,
    IBV_WR_SEND_WITH_IMM,      IBV_WR_RDMA_READ,           IBV_WR_ATOMIC_CMP_AND_SWP,
    IBV_WR_ATOMIC_FETCH_AND_ADD,
};
const uint32_t amnet_ibv_send_flag_values[3] = {IBV_SEND_FENCE, IBV_SEND_SIGNALED,
                                                IBV_SEND_INLINE};
const uint32_t amnet_ibv_access_values[4] = {IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_WRITE,
                                             IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_ATOMIC};
const uint32_t amnet_ibv_wc_with_imm = IBV_WC_WITH_IMM;
const uint32_t amnet_ibv_wc_opcode_values[7] = {
    IBV_WC_SEND,       IBV_WC_RDMA_WRITE, IBV_WC_RDMA_READ,           IBV_WC_COMP_SWAP,
    IBV_WC_FETCH_ADD,  IBV_WC_RECV,       IBV_WC_RECV_RDMA_WITH_IMM,
};
const uint32_t amnet_ibv_wc_status_values[10] = {
    IBV_WC_SUCCESS,        IBV_WC_LOC_LEN_ERR,    IBV_WC_LOC_QP_OP_ERR, IBV_WC_LOC_PROT_ERR,
    IBV_WC_WR_FLUSH_ERR,   IBV_WC_REM_INV_REQ_ERR, IBV_WC_REM_ACCESS_ERR, IBV_WC_REM_OP_ERR,
    IBV_WC_RETRY_EXC_ERR,  IBV_WC_RNR_RETRY_EXC_ERR,
};
const uint32_t amnet_ibv_qp_state_values[7] = {IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR,
                                               IBV_QPS_RTS,   IBV_QPS_SQD,  IBV_QPS_SQE,
                                               IBV_QPS_ERR};
const uint32_t amnet_ibv_port_active = IBV_PORT_ACTIVE;
const uint32_t amnet_ibv_link_layer_ethernet = IBV_LINK_LAYER_ETHERNET;
const uint32_t amnet_ibv_atomic_none = IBV_ATOMIC_NONE;
