/* GASNet-1's VIS extension (gasnet_vis.h), written only against GASNet's headers: vector,
 * indexed and strided puts to the next node and gets back, blocking, _nb (synced with
 * gasnet_wait_syncnb) and _nbi, with local buffers in the segment and on the heap; every
 * byte checked. */
#include "gasnet_check.h"
#include <gasnet_vis.h>

#define SEGSZ (16 * GASNET_PAGESIZE)

static gasnet_seginfo_t *segs;

static unsigned char val(int round, size_t k) { return (unsigned char)(round * 29 + k * 7 + 3); }

/* One round: the 3 x 40-byte pieces of `src` go to the next node's segment (at 1 KiB, 2 KiB, 3
 * KiB by vector, as 10-byte chunks by index, as a 3 x 40 strided block with row stride 100),
 * then come back into `back`, compared with `src`. */
static void round_trip(int round, int mode, unsigned char *src, unsigned char *back) {
    gasnet_node_t peer = (me + 1) % nodes;
    unsigned char *rseg = (unsigned char *)segs[peer].addr;
    for (size_t k = 0; k < 120; k++)
        src[k] = val(round, k);
    memset(back, 0, 120);
    int kind = round % 3;
    gasnet_handle_t h = GASNET_INVALID_HANDLE;
    if (kind == 0) {
        gasnet_memvec_t d[3], s[1], b[2], r[3];
        for (int i = 0; i < 3; i++) {
            d[i].addr = rseg + 1024 * (i + 1);
            d[i].len = 40;
            r[i] = d[i];
        }
        s[0].addr = src;
        s[0].len = 120;
        b[0].addr = back;
        b[0].len = 50;
        b[1].addr = back + 50;
        b[1].len = 70;
        if (mode == 0)
            gasnet_putv_bulk(peer, 3, d, 1, s);
        else if (mode == 1)
            h = gasnet_putv_nb_bulk(peer, 3, d, 1, s);
        else
            gasnet_putv_nbi_bulk(peer, 3, d, 1, s);
        gasnet_wait_syncnb(h);
        gasnet_wait_syncnbi_all();
        if (mode == 1)
            h = gasnet_getv_nb_bulk(2, b, peer, 3, r);
        else if (mode == 2)
            gasnet_getv_nbi_bulk(2, b, peer, 3, r);
        else
            gasnet_getv_bulk(2, b, peer, 3, r);
    } else if (kind == 1) {
        void *d[12], *s[1], *b[3], *r[12];
        for (int i = 0; i < 12; i++) {
            d[i] = rseg + 4096 + 16 * i;
            r[i] = d[i];
        }
        s[0] = src;
        b[0] = back;
        b[1] = back + 40;
        b[2] = back + 80;
        if (mode == 0)
            gasnet_puti_bulk(peer, 12, d, 10, 1, s, 120);
        else if (mode == 1)
            h = gasnet_puti_nb_bulk(peer, 12, d, 10, 1, s, 120);
        else
            gasnet_puti_nbi_bulk(peer, 12, d, 10, 1, s, 120);
        gasnet_wait_syncnb(h);
        gasnet_wait_syncnbi_all();
        if (mode == 1)
            h = gasnet_geti_nb_bulk(3, b, 40, peer, 12, r, 10);
        else if (mode == 2)
            gasnet_geti_nbi_bulk(3, b, 40, peer, 12, r, 10);
        else
            gasnet_geti_bulk(3, b, 40, peer, 12, r, 10);
    } else {
        size_t count[2] = {40, 3}, rstride[1] = {100}, lstride[1] = {40};
        void *d = rseg + 8192;
        if (mode == 0)
            gasnet_puts_bulk(peer, d, rstride, src, lstride, count, 1);
        else if (mode == 1)
            h = gasnet_puts_nb_bulk(peer, d, rstride, src, lstride, count, 1);
        else
            gasnet_puts_nbi_bulk(peer, d, rstride, src, lstride, count, 1);
        gasnet_wait_syncnb(h);
        gasnet_wait_syncnbi_all();
        if (mode == 1)
            h = gasnet_gets_nb_bulk(back, lstride, peer, d, rstride, count, 1);
        else if (mode == 2)
            gasnet_gets_nbi_bulk(back, lstride, peer, d, rstride, count, 1);
        else
            gasnet_gets_bulk(back, lstride, peer, d, rstride, count, 1);
    }
    gasnet_wait_syncnb(h);
    gasnet_wait_syncnbi_all();
    if (memcmp(src, back, 120) != 0)
        FAILED("round %d (%s, mode %d): the data came back changed", round,
               kind == 0 ? "vector" : kind == 1 ? "indexed" : "strided", mode);
}

int main(int argc, char **argv) {
    if (gasnet_init(&argc, &argv) != GASNET_OK)
        return 1;
    me = gasnet_mynode();
    nodes = gasnet_nodes();
    if (gasnet_attach(NULL, 0, SEGSZ, 0) != GASNET_OK)
        FAILED("gasnet_attach");
    segs = (gasnet_seginfo_t *)malloc(nodes * sizeof *segs);
    if (!segs || gasnet_getSegmentInfo(segs, (int)nodes) != GASNET_OK)
        FAILED("gasnet_getSegmentInfo");
    unsigned char *heap = (unsigned char *)malloc(240);
    /* Local buffers in this node's own segment, above what its predecessor writes. */
    unsigned char *mine = (unsigned char *)segs[me].addr + 12 * 1024;
    for (int round = 0; round < 18; round++) {
        unsigned char *base = round % 2 ? mine : heap;
        round_trip(round, (round / 3) % 3, base, base + 120);
        barrier();
    }
    char buf[512];
    gasnet_memvec_t v = {heap, 120};
    gasnett_format_memveclist(buf, 1, &v);
    if (!strstr(buf, "120"))
        FAILED("gasnett_format_memveclist: %s", buf);
    free(heap);
    free(segs);
    barrier();
    gasnet_exit(0);
    return 0;
}
