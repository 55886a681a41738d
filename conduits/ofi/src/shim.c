/*
 * The C side of the ofi conduit's bindings. libfabric's data-path calls (fi_tsend, fi_trecv,
 * fi_cq_read, fi_write, ...) are static inline functions that jump through a provider's
 * operation tables, so Rust cannot link to them: each gets a one-line wrapper here. The set-up
 * steps (getinfo, open, bind, enable) are grouped into a few calls, and the constants Rust
 * needs are exported as variables, so that no value is written twice. Every function returns
 * libfabric's own return value (0 or a negative FI_E* code) unless its comment says otherwise.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

/* Capability bits and flags. */
const uint64_t amnet_ofi_FI_RMA = FI_RMA;
const uint64_t amnet_ofi_FI_TAGGED = FI_TAGGED;
const uint64_t amnet_ofi_FI_READ = FI_READ;
const uint64_t amnet_ofi_FI_WRITE = FI_WRITE;
const uint64_t amnet_ofi_FI_REMOTE_READ = FI_REMOTE_READ;
const uint64_t amnet_ofi_FI_REMOTE_WRITE = FI_REMOTE_WRITE;
const uint64_t amnet_ofi_FI_REMOTE_CQ_DATA = FI_REMOTE_CQ_DATA;
const uint64_t amnet_ofi_FI_DIRECTED_RECV = FI_DIRECTED_RECV;
const uint64_t amnet_ofi_FI_MR_VIRT_ADDR = FI_MR_VIRT_ADDR;
const uint64_t amnet_ofi_FI_DELIVERY_COMPLETE = FI_DELIVERY_COMPLETE;
/* Error codes, as positive numbers (calls return their negation). */
const int amnet_ofi_FI_EAGAIN = FI_EAGAIN;
const int amnet_ofi_FI_EAVAIL = FI_EAVAIL;
const int amnet_ofi_FI_ENODATA = FI_ENODATA;
/* Layout of a tagged completion, for the test that checks Rust's copy of the struct. */
const size_t amnet_ofi_cq_entry_size = sizeof(struct fi_cq_tagged_entry);
const size_t amnet_ofi_cq_entry_data_offset = offsetof(struct fi_cq_tagged_entry, data);
const size_t amnet_ofi_cq_entry_tag_offset = offsetof(struct fi_cq_tagged_entry, tag);
const size_t amnet_ofi_context_size = sizeof(struct fi_context);

/* What the conduit reads of one fi_info answer. */
struct amnet_ofi_desc {
    uint64_t caps;
    uint64_t mode;
    uint64_t mem_tag_format;
    uint64_t mr_mode;
    uint64_t max_msg_size;
    uint64_t inject_size;
    uint64_t cq_data_size;
    uint64_t max_order_raw_size;
    uint64_t sockaddr; /* 1 when addresses are socket addresses (tcp, udp, sockets) */
    char prov_name[64];
    char fabric_name[64];
    char domain_name[64];
};

static void copy_name(char *dst, const char *src) {
    snprintf(dst, 64, "%s", src ? src : "");
}

/*
 * Ask for reliable-datagram endpoints with `caps` (FI_TAGGED, plus FI_RMA when wanted),
 * the modes the conduit can serve (FI_CONTEXT: every operation's context is a struct
 * fi_context at the start of the conduit's request), and the memory registration modes it
 * handles. `node` and `service`, where not null, pin the source address (tests keep the tcp
 * and udp providers on loopback with them). `prov_name`, where not null, asks for that
 * provider. The list is freed with amnet_ofi_freeinfo.
 */
int amnet_ofi_getinfo(uint64_t caps, const char *prov_name, const char *node, const char *service,
                      struct fi_info **out) {
    struct fi_info *hints = fi_allocinfo();
    if (!hints)
        return -FI_ENOMEM;
    hints->caps = caps;
    hints->mode = FI_CONTEXT;
    hints->ep_attr->type = FI_EP_RDM;
    /* Not FI_MR_LOCAL: sends and RMA name no local descriptor, so providers that need
       registered local buffers are not offered. */
    hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY |
                                  FI_MR_ENDPOINT;
    hints->domain_attr->threading = FI_THREAD_SAFE;
    hints->domain_attr->control_progress = FI_PROGRESS_MANUAL;
    hints->domain_attr->data_progress = FI_PROGRESS_MANUAL;
    hints->tx_attr->msg_order = FI_ORDER_SAS;
    hints->rx_attr->msg_order = FI_ORDER_SAS;
    if (prov_name)
        hints->fabric_attr->prov_name = strdup(prov_name);
    int rc = fi_getinfo(FI_VERSION(1, 10), node, service, node || service ? FI_SOURCE : 0,
                        hints, out);
    fi_freeinfo(hints);
    return rc;
}

void amnet_ofi_freeinfo(struct fi_info *info) { fi_freeinfo(info); }

struct fi_info *amnet_ofi_info_next(const struct fi_info *info) { return info->next; }

void amnet_ofi_describe(const struct fi_info *info, struct amnet_ofi_desc *d) {
    memset(d, 0, sizeof *d);
    d->caps = info->caps;
    d->mode = info->mode;
    d->mem_tag_format = info->ep_attr ? info->ep_attr->mem_tag_format : 0;
    d->max_msg_size = info->ep_attr ? info->ep_attr->max_msg_size : 0;
    d->max_order_raw_size = info->ep_attr ? info->ep_attr->max_order_raw_size : 0;
    d->inject_size = info->tx_attr ? info->tx_attr->inject_size : 0;
    d->mr_mode = info->domain_attr ? (uint64_t)info->domain_attr->mr_mode : 0;
    d->cq_data_size = info->domain_attr ? info->domain_attr->cq_data_size : 0;
    d->sockaddr = info->addr_format == FI_SOCKADDR || info->addr_format == FI_SOCKADDR_IN ||
                  info->addr_format == FI_SOCKADDR_IN6;
    copy_name(d->prov_name, info->fabric_attr ? info->fabric_attr->prov_name : NULL);
    copy_name(d->fabric_name, info->fabric_attr ? info->fabric_attr->name : NULL);
    copy_name(d->domain_name, info->domain_attr ? info->domain_attr->name : NULL);
}

/* The objects of one open endpoint. */
struct amnet_ofi_ep {
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_ep *ep;
};

static void close_fid(struct fid **f) {
    if (*f) {
        fi_close(*f);
        *f = NULL;
    }
}

void amnet_ofi_close(struct amnet_ofi_ep *e) {
    close_fid((struct fid **)&e->ep);
    close_fid((struct fid **)&e->av);
    close_fid((struct fid **)&e->cq);
    close_fid((struct fid **)&e->domain);
    close_fid((struct fid **)&e->fabric);
}

/*
 * Open fabric, domain, a tagged completion queue, a table address vector and the endpoint of
 * `info`, bind them and enable the endpoint, named `name` first when it is not NULL
 * (`fi_setname`). On failure everything opened is closed again and `*step` names the call that
 * failed.
 */
int amnet_ofi_open(struct fi_info *info, struct amnet_ofi_ep *e, const char *name,
                   const char **step) {
    memset(e, 0, sizeof *e);
    int rc;
    struct fi_cq_attr cq_attr;
    struct fi_av_attr av_attr;
    memset(&cq_attr, 0, sizeof cq_attr);
    memset(&av_attr, 0, sizeof av_attr);
    cq_attr.format = FI_CQ_FORMAT_TAGGED;
    cq_attr.wait_obj = FI_WAIT_NONE;
    av_attr.type = FI_AV_TABLE;
#define STEP(name, call)                                                                          \
    do {                                                                                          \
        *step = name;                                                                             \
        rc = (call);                                                                              \
        if (rc) {                                                                                 \
            amnet_ofi_close(e);                                                                   \
            return rc;                                                                            \
        }                                                                                         \
    } while (0)
    STEP("fi_fabric", fi_fabric(info->fabric_attr, &e->fabric, NULL));
    STEP("fi_domain", fi_domain(e->fabric, info, &e->domain, NULL));
    STEP("fi_cq_open", fi_cq_open(e->domain, &cq_attr, &e->cq, NULL));
    STEP("fi_av_open", fi_av_open(e->domain, &av_attr, &e->av, NULL));
    STEP("fi_endpoint", fi_endpoint(e->domain, info, &e->ep, NULL));
    STEP("fi_ep_bind(cq)", fi_ep_bind(e->ep, &e->cq->fid, FI_TRANSMIT | FI_RECV));
    STEP("fi_ep_bind(av)", fi_ep_bind(e->ep, &e->av->fid, 0));
    if (name)
        STEP("fi_setname", fi_setname(&e->ep->fid, (void *)name, strlen(name) + 1));
    STEP("fi_enable", fi_enable(e->ep));
#undef STEP
    *step = "";
    return 0;
}

/*
 * Shared-memory objects to unlink when the process exits (`exit` or a return from `main`): the
 * shm provider removes an endpoint's region only when the endpoint is closed, which a process
 * that ends while its peers may still write to it never does.
 */
#define AMNET_UNLINK_MAX 64
static char *unlink_names[AMNET_UNLINK_MAX];
static int unlink_count;
static int unlink_registered;
static pthread_mutex_t unlink_lock = PTHREAD_MUTEX_INITIALIZER;

static void unlink_all(void) {
    pthread_mutex_lock(&unlink_lock);
    for (int i = 0; i < unlink_count; i++)
        shm_unlink(unlink_names[i]);
    pthread_mutex_unlock(&unlink_lock);
}

/* Unlink the shared-memory object `name` when the process exits; 0, or -1 when no room. */
int amnet_ofi_unlink_at_exit(const char *name) {
    int rc = -1;
    pthread_mutex_lock(&unlink_lock);
    if (!unlink_registered) {
        if (atexit(unlink_all) != 0) {
            pthread_mutex_unlock(&unlink_lock);
            return -1;
        }
        unlink_registered = 1;
    }
    if (unlink_count < AMNET_UNLINK_MAX) {
        char *copy = strdup(name);
        if (copy) {
            unlink_names[unlink_count++] = copy;
            rc = 0;
        }
    }
    pthread_mutex_unlock(&unlink_lock);
    return rc;
}

/* The endpoint's address: `*len` is the buffer's size in, the address's length out. */
int amnet_ofi_getname(struct amnet_ofi_ep *e, void *addr, size_t *len) {
    return fi_getname(&e->ep->fid, addr, len);
}

/* Insert `count` addresses, packed `len` bytes apart; returns how many were inserted. */
int amnet_ofi_av_insert(struct amnet_ofi_ep *e, const void *addrs, size_t count,
                        fi_addr_t *out) {
    return fi_av_insert(e->av, addrs, count, out, 0, NULL);
}

ssize_t amnet_ofi_tsend(struct amnet_ofi_ep *e, const void *buf, size_t len, void *desc,
                        fi_addr_t dest, uint64_t tag, void *ctx) {
    return fi_tsend(e->ep, buf, len, desc, dest, tag, ctx);
}

ssize_t amnet_ofi_tsenddata(struct amnet_ofi_ep *e, const void *buf, size_t len, void *desc,
                            uint64_t data, fi_addr_t dest, uint64_t tag, void *ctx) {
    return fi_tsenddata(e->ep, buf, len, desc, data, dest, tag, ctx);
}

ssize_t amnet_ofi_tinject(struct amnet_ofi_ep *e, const void *buf, size_t len, fi_addr_t dest,
                          uint64_t tag) {
    return fi_tinject(e->ep, buf, len, dest, tag);
}

ssize_t amnet_ofi_tinjectdata(struct amnet_ofi_ep *e, const void *buf, size_t len,
                              uint64_t data, fi_addr_t dest, uint64_t tag) {
    return fi_tinjectdata(e->ep, buf, len, data, dest, tag);
}

ssize_t amnet_ofi_trecv(struct amnet_ofi_ep *e, void *buf, size_t len, void *desc,
                        fi_addr_t src, uint64_t tag, uint64_t ignore, void *ctx) {
    return fi_trecv(e->ep, buf, len, desc, src, tag, ignore, ctx);
}

/* Up to `count` tagged completions; -FI_EAGAIN when none, -FI_EAVAIL when an error waits. */
ssize_t amnet_ofi_cq_read(struct amnet_ofi_ep *e, struct fi_cq_tagged_entry *entries,
                          size_t count) {
    return fi_cq_read(e->cq, entries, count);
}

/*
 * Read one error completion: its context, the error (positive FI_E* code) and the provider's
 * description of it in `msg` (at most `msg_len` bytes, NUL-terminated). Returns 1 when one
 * was read, 0 when none waits, or a negative code.
 */
int amnet_ofi_cq_readerr(struct amnet_ofi_ep *e, void **ctx, int *err, char *msg,
                         size_t msg_len) {
    struct fi_cq_err_entry ee;
    memset(&ee, 0, sizeof ee);
    ssize_t rc = fi_cq_readerr(e->cq, &ee, 0);
    if (rc == -FI_EAGAIN)
        return 0;
    if (rc < 0)
        return (int)rc;
    *ctx = ee.op_context;
    *err = ee.err;
    const char *s = fi_cq_strerror(e->cq, ee.prov_errno, ee.err_data, NULL, 0);
    snprintf(msg, msg_len, "%s (provider error %d: %s)", fi_strerror(ee.err), ee.prov_errno,
             s ? s : "");
    return 1;
}

/* Register `len` bytes at `buf` for local use and remote reads and writes under `key`. */
int amnet_ofi_mr_reg(struct amnet_ofi_ep *e, void *buf, size_t len, uint64_t key,
                     struct fid_mr **mr, uint64_t mr_mode) {
    uint64_t access = FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
    int rc = fi_mr_reg(e->domain, buf, len, access, 0, key, 0, mr, NULL);
    if (rc)
        return rc;
    if (mr_mode & FI_MR_ENDPOINT) {
        rc = fi_mr_bind(*mr, &e->ep->fid, 0);
        if (!rc)
            rc = fi_mr_enable(*mr);
        if (rc) {
            fi_close(&(*mr)->fid);
            *mr = NULL;
        }
    }
    return rc;
}

uint64_t amnet_ofi_mr_key(struct fid_mr *mr) { return fi_mr_key(mr); }

void amnet_ofi_mr_close(struct fid_mr *mr) {
    if (mr)
        fi_close(&mr->fid);
}

/*
 * Write `len` bytes at `buf` into `dest`'s memory at `addr` under `key`, with a completion
 * carrying `ctx`. `flags` adds to FI_COMPLETION: FI_REMOTE_CQ_DATA (then the target gets a
 * completion carrying `data`) and FI_DELIVERY_COMPLETE (then the completion means the data
 * is visible in the target's memory, not only sent).
 */
ssize_t amnet_ofi_write(struct amnet_ofi_ep *e, const void *buf, size_t len, fi_addr_t dest,
                        uint64_t addr, uint64_t key, void *ctx, uint64_t data, uint64_t flags) {
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    struct fi_rma_iov rma = {.addr = addr, .len = len, .key = key};
    struct fi_msg_rma msg = {.msg_iov = &iov,
                             .desc = NULL,
                             .iov_count = 1,
                             .addr = dest,
                             .rma_iov = &rma,
                             .rma_iov_count = 1,
                             .context = ctx,
                             .data = data};
    return fi_writemsg(e->ep, &msg, flags | FI_COMPLETION);
}

ssize_t amnet_ofi_read(struct amnet_ofi_ep *e, void *buf, size_t len, void *desc, fi_addr_t src,
                       uint64_t addr, uint64_t key, void *ctx) {
    return fi_read(e->ep, buf, len, desc, src, addr, key, ctx);
}

const char *amnet_ofi_strerror(int err) { return fi_strerror(err); }
