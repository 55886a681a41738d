/* gasnet_vis.h: GASNet-1's non-contiguous put/get extension (vector, indexed and strided; VIS)
 * over amnet's (amnet_put_vector, _indexed, _strided and their gets). Remote addresses are
 * translated to segment offsets as gasnet.h's put/get do. Every call is a bulk transfer; the
 * _nb forms return a handle for gasnet_wait_syncnb (GASNET_INVALID_HANDLE when the transfer
 * completed before returning: a get whose destination lies outside this node's segment), and
 * the _nbi forms complete before returning. A call that fails ends the job with a message. */

#ifndef AMNET_GASNET_VIS_H
#define AMNET_GASNET_VIS_H

#include "gasnet.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    void *addr;
    size_t len;
} gasnet_memvec_t;

/* ---- descriptions of VIS arguments (GASNet's tools, for diagnostics) ------------------- */

/* The buffer size the matching gasnett_format_* call needs. */
static inline size_t gasnett_format_memveclist_bufsz(size_t count) { return 64 + count * 48; }
static inline size_t gasnett_format_addrlist_bufsz(size_t count) { return 64 + count * 24; }
static inline size_t gasnett_format_putsgets_bufsz(size_t stridelevels) {
    return 160 + stridelevels * 72;
}
/* `count` (address, length) pairs, as text. */
static inline void gasnett_format_memveclist(char *buf, size_t count,
                                             gasnet_memvec_t const *list) {
    size_t at = (size_t)sprintf(buf, "%zu entries:", count);
    for (size_t i = 0; i < count; i++)
        at += (size_t)sprintf(buf + at, " (%p, %zu)", list[i].addr, list[i].len);
}
/* `count` addresses of `len` bytes each, as text. */
static inline void gasnett_format_addrlist(char *buf, size_t count, void *const *list,
                                           size_t len) {
    size_t at = (size_t)sprintf(buf, "%zu entries of %zu bytes:", count, len);
    for (size_t i = 0; i < count; i++)
        at += (size_t)sprintf(buf + at, " %p", list[i]);
}
/* A strided transfer's description, as text (`stats` is not used). */
static inline void gasnett_format_putsgets(char *buf, void *stats, gasnet_node_t node,
                                           void *dstaddr, const size_t dststrides[],
                                           void *srcaddr, const size_t srcstrides[],
                                           const size_t count[], size_t stridelevels) {
    (void)stats;
    size_t at = (size_t)sprintf(buf, "node %u dst %p src %p levels %zu count [%zu",
                                (unsigned)node, dstaddr, srcaddr, stridelevels, count[0]);
    for (size_t l = 0; l < stridelevels; l++)
        at += (size_t)sprintf(buf + at, " %zu", count[l + 1]);
    at += (size_t)sprintf(buf + at, "] dststrides [");
    for (size_t l = 0; l < stridelevels; l++)
        at += (size_t)sprintf(buf + at, "%s%zu", l ? " " : "", dststrides[l]);
    at += (size_t)sprintf(buf + at, "] srcstrides [");
    for (size_t l = 0; l < stridelevels; l++)
        at += (size_t)sprintf(buf + at, "%s%zu", l ? " " : "", srcstrides[l]);
    sprintf(buf + at, "]");
}

/* ---- the layer's helpers (not part of the GASNet API) ---------------------------------- */

static inline void *amnet_gasnet_vis_alloc(const char *fn, size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    if (!p) {
        fprintf(stderr, "GASNet (amnet) error in %s: out of memory for %zu entries\n", fn, n);
        amnet_exit(1);
    }
    return p;
}

/* Whether `len` bytes at `p` lie in this node's segment (then *off is their offset). */
static inline int amnet_gasnet_vis_mine(const void *p, size_t len, uint64_t *off) {
    uintptr_t a = (uintptr_t)p, base = (uintptr_t)amnet_gasnet_segs[amnet_gasnet_me].addr;
    uintptr_t size = amnet_gasnet_segs[amnet_gasnet_me].size;
    if (a < base || a - base > size || len > size - (a - base))
        return 0;
    *off = amnet_gasnet_off("gasnet_vis", amnet_gasnet_me, p);
    return 1;
}

static inline amnet_range_t *amnet_gasnet_vis_ranges(const char *fn, gasnet_node_t node,
                                                     size_t count, gasnet_memvec_t const list[]) {
    amnet_range_t *r = (amnet_range_t *)amnet_gasnet_vis_alloc(fn, count, sizeof *r);
    for (size_t i = 0; i < count; i++) {
        r[i].offset = list[i].len ? amnet_gasnet_off(fn, node, list[i].addr) : 0;
        r[i].len = list[i].len;
    }
    return r;
}

static inline uint64_t *amnet_gasnet_vis_offs(const char *fn, gasnet_node_t node, size_t count,
                                              void *const list[], size_t len) {
    uint64_t *o = (uint64_t *)amnet_gasnet_vis_alloc(fn, count, sizeof *o);
    for (size_t i = 0; i < count; i++)
        o[i] = len ? amnet_gasnet_off(fn, node, list[i]) : 0;
    return o;
}

/* ---- vector ------------------------------------------------------------------------------ */

static inline gasnet_handle_t amnet_gasnet_putv(const char *fn, int nb, gasnet_node_t dstnode,
                                                size_t dstcount, gasnet_memvec_t const dstlist[],
                                                size_t srccount,
                                                gasnet_memvec_t const srclist[]) {
    amnet_range_t *d = amnet_gasnet_vis_ranges(fn, dstnode, dstcount, dstlist);
    amnet_cbuf_t *s = (amnet_cbuf_t *)amnet_gasnet_vis_alloc(fn, srccount, sizeof *s);
    for (size_t i = 0; i < srccount; i++) {
        s[i].addr = srclist[i].addr;
        s[i].len = srclist[i].len;
    }
    gasnet_handle_t h = GASNET_INVALID_HANDLE;
    int rc = nb ? amnet_put_vector_nb(dstnode, d, dstcount, s, srccount, &h)
                : amnet_put_vector(dstnode, d, dstcount, s, srccount);
    free(d);
    free(s);
    if (rc != AMNET_OK)
        amnet_gasnet_fatal(fn, rc);
    return h;
}

static inline gasnet_handle_t amnet_gasnet_getv(const char *fn, int nb, size_t dstcount,
                                                gasnet_memvec_t const dstlist[],
                                                gasnet_node_t srcnode, size_t srccount,
                                                gasnet_memvec_t const srclist[]) {
    amnet_range_t *s = amnet_gasnet_vis_ranges(fn, srcnode, srccount, srclist);
    gasnet_handle_t h = GASNET_INVALID_HANDLE;
    int rc = AMNET_OK;
    amnet_range_t *dl = NULL;
    if (nb) {
        /* Non-blocking only into this node's segment (the library writes it after return). */
        dl = (amnet_range_t *)amnet_gasnet_vis_alloc(fn, dstcount, sizeof *dl);
        for (size_t i = 0; i < dstcount && nb; i++) {
            dl[i].len = dstlist[i].len;
            nb = !dstlist[i].len || amnet_gasnet_vis_mine(dstlist[i].addr, dstlist[i].len,
                                                          &dl[i].offset);
        }
    }
    if (nb) {
        rc = amnet_get_vector_nb_local(srcnode, s, srccount, dl, dstcount, &h);
    } else {
        amnet_buf_t *d = (amnet_buf_t *)amnet_gasnet_vis_alloc(fn, dstcount, sizeof *d);
        for (size_t i = 0; i < dstcount; i++) {
            d[i].addr = dstlist[i].addr;
            d[i].len = dstlist[i].len;
        }
        rc = amnet_get_vector(srcnode, s, srccount, d, dstcount);
        free(d);
    }
    free(dl);
    free(s);
    if (rc != AMNET_OK)
        amnet_gasnet_fatal(fn, rc);
    return h;
}

static inline void gasnet_putv_bulk(gasnet_node_t dstnode, size_t dstcount,
                                    gasnet_memvec_t const dstlist[], size_t srccount,
                                    gasnet_memvec_t const srclist[]) {
    amnet_gasnet_putv("gasnet_putv_bulk", 0, dstnode, dstcount, dstlist, srccount, srclist);
}
static inline gasnet_handle_t gasnet_putv_nb_bulk(gasnet_node_t dstnode, size_t dstcount,
                                                  gasnet_memvec_t const dstlist[],
                                                  size_t srccount,
                                                  gasnet_memvec_t const srclist[]) {
    return amnet_gasnet_putv("gasnet_putv_nb_bulk", 1, dstnode, dstcount, dstlist, srccount,
                             srclist);
}
static inline void gasnet_putv_nbi_bulk(gasnet_node_t dstnode, size_t dstcount,
                                        gasnet_memvec_t const dstlist[], size_t srccount,
                                        gasnet_memvec_t const srclist[]) {
    amnet_gasnet_putv("gasnet_putv_nbi_bulk", 0, dstnode, dstcount, dstlist, srccount, srclist);
}
static inline void gasnet_getv_bulk(size_t dstcount, gasnet_memvec_t const dstlist[],
                                    gasnet_node_t srcnode, size_t srccount,
                                    gasnet_memvec_t const srclist[]) {
    amnet_gasnet_getv("gasnet_getv_bulk", 0, dstcount, dstlist, srcnode, srccount, srclist);
}
static inline gasnet_handle_t gasnet_getv_nb_bulk(size_t dstcount,
                                                  gasnet_memvec_t const dstlist[],
                                                  gasnet_node_t srcnode, size_t srccount,
                                                  gasnet_memvec_t const srclist[]) {
    return amnet_gasnet_getv("gasnet_getv_nb_bulk", 1, dstcount, dstlist, srcnode, srccount,
                             srclist);
}
static inline void gasnet_getv_nbi_bulk(size_t dstcount, gasnet_memvec_t const dstlist[],
                                        gasnet_node_t srcnode, size_t srccount,
                                        gasnet_memvec_t const srclist[]) {
    amnet_gasnet_getv("gasnet_getv_nbi_bulk", 0, dstcount, dstlist, srcnode, srccount, srclist);
}

/* ---- indexed ----------------------------------------------------------------------------- */

static inline gasnet_handle_t amnet_gasnet_puti(const char *fn, int nb, gasnet_node_t dstnode,
                                                size_t dstcount, void *const dstlist[],
                                                size_t dstlen, size_t srccount,
                                                void *const srclist[], size_t srclen) {
    uint64_t *d = amnet_gasnet_vis_offs(fn, dstnode, dstcount, dstlist, dstlen);
    gasnet_handle_t h = GASNET_INVALID_HANDLE;
    const void *const *s = (const void *const *)srclist;
    int rc = nb ? amnet_put_indexed_nb(dstnode, d, dstcount, dstlen, s, srccount, srclen, &h)
                : amnet_put_indexed(dstnode, d, dstcount, dstlen, s, srccount, srclen);
    free(d);
    if (rc != AMNET_OK)
        amnet_gasnet_fatal(fn, rc);
    return h;
}

static inline gasnet_handle_t amnet_gasnet_geti(const char *fn, int nb, size_t dstcount,
                                                void *const dstlist[], size_t dstlen,
                                                gasnet_node_t srcnode, size_t srccount,
                                                void *const srclist[], size_t srclen) {
    uint64_t *s = amnet_gasnet_vis_offs(fn, srcnode, srccount, srclist, srclen);
    gasnet_handle_t h = GASNET_INVALID_HANDLE;
    uint64_t *dl = NULL;
    if (nb) {
        dl = (uint64_t *)amnet_gasnet_vis_alloc(fn, dstcount, sizeof *dl);
        for (size_t i = 0; i < dstcount && nb; i++)
            nb = !dstlen || amnet_gasnet_vis_mine(dstlist[i], dstlen, &dl[i]);
    }
    int rc = nb ? amnet_get_indexed_nb_local(srcnode, s, srccount, srclen, dl, dstcount, dstlen,
                                             &h)
                : amnet_get_indexed(srcnode, s, srccount, srclen, dstlist, dstcount, dstlen);
    free(dl);
    free(s);
    if (rc != AMNET_OK)
        amnet_gasnet_fatal(fn, rc);
    return h;
}

static inline void gasnet_puti_bulk(gasnet_node_t dstnode, size_t dstcount, void *const dstlist[],
                                    size_t dstlen, size_t srccount, void *const srclist[],
                                    size_t srclen) {
    amnet_gasnet_puti("gasnet_puti_bulk", 0, dstnode, dstcount, dstlist, dstlen, srccount,
                      srclist, srclen);
}
static inline gasnet_handle_t gasnet_puti_nb_bulk(gasnet_node_t dstnode, size_t dstcount,
                                                  void *const dstlist[], size_t dstlen,
                                                  size_t srccount, void *const srclist[],
                                                  size_t srclen) {
    return amnet_gasnet_puti("gasnet_puti_nb_bulk", 1, dstnode, dstcount, dstlist, dstlen,
                             srccount, srclist, srclen);
}
static inline void gasnet_puti_nbi_bulk(gasnet_node_t dstnode, size_t dstcount,
                                        void *const dstlist[], size_t dstlen, size_t srccount,
                                        void *const srclist[], size_t srclen) {
    amnet_gasnet_puti("gasnet_puti_nbi_bulk", 0, dstnode, dstcount, dstlist, dstlen, srccount,
                      srclist, srclen);
}
static inline void gasnet_geti_bulk(size_t dstcount, void *const dstlist[], size_t dstlen,
                                    gasnet_node_t srcnode, size_t srccount, void *const srclist[],
                                    size_t srclen) {
    amnet_gasnet_geti("gasnet_geti_bulk", 0, dstcount, dstlist, dstlen, srcnode, srccount,
                      srclist, srclen);
}
static inline gasnet_handle_t gasnet_geti_nb_bulk(size_t dstcount, void *const dstlist[],
                                                  size_t dstlen, gasnet_node_t srcnode,
                                                  size_t srccount, void *const srclist[],
                                                  size_t srclen) {
    return amnet_gasnet_geti("gasnet_geti_nb_bulk", 1, dstcount, dstlist, dstlen, srcnode,
                             srccount, srclist, srclen);
}
static inline void gasnet_geti_nbi_bulk(size_t dstcount, void *const dstlist[], size_t dstlen,
                                        gasnet_node_t srcnode, size_t srccount,
                                        void *const srclist[], size_t srclen) {
    amnet_gasnet_geti("gasnet_geti_nbi_bulk", 0, dstcount, dstlist, dstlen, srcnode, srccount,
                      srclist, srclen);
}

/* ---- strided ----------------------------------------------------------------------------- */

/* The bytes a strided region spans from its first byte. */
static inline size_t amnet_gasnet_vis_span(const size_t strides[], const size_t count[],
                                           size_t stridelevels) {
    size_t span = count[0];
    for (size_t l = 0; l < stridelevels; l++)
        if (count[l + 1] > 0)
            span += strides[l] * (count[l + 1] - 1);
    return span;
}

static inline gasnet_handle_t amnet_gasnet_puts(const char *fn, int nb, gasnet_node_t dstnode,
                                                void *dstaddr, const size_t dststrides[],
                                                void *srcaddr, const size_t srcstrides[],
                                                const size_t count[], size_t stridelevels) {
    uint64_t off = amnet_gasnet_off(fn, dstnode, dstaddr);
    uint64_t *ds = (uint64_t *)amnet_gasnet_vis_alloc(fn, stridelevels, sizeof *ds);
    for (size_t l = 0; l < stridelevels; l++)
        ds[l] = dststrides[l];
    gasnet_handle_t h = GASNET_INVALID_HANDLE;
    int rc = nb ? amnet_put_strided_nb(dstnode, off, ds, srcaddr, srcstrides, count,
                                       stridelevels, &h)
                : amnet_put_strided(dstnode, off, ds, srcaddr, srcstrides, count, stridelevels);
    free(ds);
    if (rc != AMNET_OK)
        amnet_gasnet_fatal(fn, rc);
    return h;
}

static inline gasnet_handle_t amnet_gasnet_gets(const char *fn, int nb, void *dstaddr,
                                                const size_t dststrides[], gasnet_node_t srcnode,
                                                void *srcaddr, const size_t srcstrides[],
                                                const size_t count[], size_t stridelevels) {
    uint64_t off = amnet_gasnet_off(fn, srcnode, srcaddr), doff = 0;
    uint64_t *ss = (uint64_t *)amnet_gasnet_vis_alloc(fn, stridelevels, sizeof *ss);
    uint64_t *dsu = (uint64_t *)amnet_gasnet_vis_alloc(fn, stridelevels, sizeof *dsu);
    for (size_t l = 0; l < stridelevels; l++) {
        ss[l] = srcstrides[l];
        dsu[l] = dststrides[l];
    }
    gasnet_handle_t h = GASNET_INVALID_HANDLE;
    if (nb)
        nb = amnet_gasnet_vis_mine(dstaddr, amnet_gasnet_vis_span(dststrides, count,
                                                                  stridelevels),
                                   &doff);
    int rc = nb ? amnet_get_strided_nb_local(srcnode, off, ss, doff, dsu, count, stridelevels,
                                             &h)
                : amnet_get_strided(srcnode, off, ss, dstaddr, dststrides, count, stridelevels);
    free(ss);
    free(dsu);
    if (rc != AMNET_OK)
        amnet_gasnet_fatal(fn, rc);
    return h;
}

static inline void gasnet_puts_bulk(gasnet_node_t dstnode, void *dstaddr,
                                    const size_t dststrides[], void *srcaddr,
                                    const size_t srcstrides[], const size_t count[],
                                    size_t stridelevels) {
    amnet_gasnet_puts("gasnet_puts_bulk", 0, dstnode, dstaddr, dststrides, srcaddr, srcstrides,
                      count, stridelevels);
}
static inline gasnet_handle_t gasnet_puts_nb_bulk(gasnet_node_t dstnode, void *dstaddr,
                                                  const size_t dststrides[], void *srcaddr,
                                                  const size_t srcstrides[],
                                                  const size_t count[], size_t stridelevels) {
    return amnet_gasnet_puts("gasnet_puts_nb_bulk", 1, dstnode, dstaddr, dststrides, srcaddr,
                             srcstrides, count, stridelevels);
}
static inline void gasnet_puts_nbi_bulk(gasnet_node_t dstnode, void *dstaddr,
                                        const size_t dststrides[], void *srcaddr,
                                        const size_t srcstrides[], const size_t count[],
                                        size_t stridelevels) {
    amnet_gasnet_puts("gasnet_puts_nbi_bulk", 0, dstnode, dstaddr, dststrides, srcaddr,
                      srcstrides, count, stridelevels);
}
static inline void gasnet_gets_bulk(void *dstaddr, const size_t dststrides[],
                                    gasnet_node_t srcnode, void *srcaddr,
                                    const size_t srcstrides[], const size_t count[],
                                    size_t stridelevels) {
    amnet_gasnet_gets("gasnet_gets_bulk", 0, dstaddr, dststrides, srcnode, srcaddr, srcstrides,
                      count, stridelevels);
}
static inline gasnet_handle_t gasnet_gets_nb_bulk(void *dstaddr, const size_t dststrides[],
                                                  gasnet_node_t srcnode, void *srcaddr,
                                                  const size_t srcstrides[],
                                                  const size_t count[], size_t stridelevels) {
    return amnet_gasnet_gets("gasnet_gets_nb_bulk", 1, dstaddr, dststrides, srcnode, srcaddr,
                             srcstrides, count, stridelevels);
}
static inline void gasnet_gets_nbi_bulk(void *dstaddr, const size_t dststrides[],
                                        gasnet_node_t srcnode, void *srcaddr,
                                        const size_t srcstrides[], const size_t count[],
                                        size_t stridelevels) {
    amnet_gasnet_gets("gasnet_gets_nbi_bulk", 0, dstaddr, dststrides, srcnode, srcaddr,
                      srcstrides, count, stridelevels);
}

#ifdef __cplusplus
}
#endif

#endif
