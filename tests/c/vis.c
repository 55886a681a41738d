/* Vector, indexed and strided put/get in every form, into the next rank's segment and back,
 * the non-blocking gets into this rank's own segment; and their errors: written pieces that
 * overlap, unequal totals, a piece outside the segment. */
#include "check.h"

enum { SEG = 64 * 1024, LOCAL = 32 * 1024 }; /* offsets from LOCAL on: this rank's own gets */

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 13 + seed + me * 7);
}

int main(void) {
    start();
    CHECK(amnet_attach(NULL, 0, SEG));
    uint32_t next = (me + 1) % nranks;
    unsigned char *seg;
    CHECK(amnet_segment((void **)&seg, NULL));

    /* Vector: pieces of 10, 0 and 30 bytes into ranges of 25 and 15. */
    unsigned char a[10], b[1], c[30], all[40], back[40];
    fill(a, 10, 1), fill(c, 30, 2);
    memcpy(all, a, 10), memcpy(all + 10, c, 30);
    amnet_cbuf_t src[] = {{a, 10}, {b, 0}, {c, 30}};
    amnet_range_t dst[] = {{100, 25}, {1000, 15}};
    CHECK(amnet_put_vector(next, dst, 2, src, 3));
    memset(back, 0, sizeof back);
    amnet_buf_t into[] = {{back, 5}, {back + 5, 35}};
    CHECK(amnet_get_vector(next, dst, 2, into, 2));
    if (memcmp(back, all, 40))
        FAIL("vector put then get differ");
    fill(a, 10, 3);
    memcpy(all, a, 10);
    amnet_handle_t h;
    CHECK(amnet_put_vector_nb(next, dst, 2, src, 3, &h));
    CHECK(amnet_sync(&h));
    amnet_range_t mine[] = {{LOCAL, 40}};
    CHECK(amnet_get_vector_nb_local(next, dst, 2, mine, 1, &h));
    CHECK(amnet_sync(&h));
    if (memcmp(seg + LOCAL, all, 40))
        FAIL("vector put_nb then get_nb_local differ");

    /* Indexed: two pieces of 24 bytes into three ranges of 16, back as four of 12. */
    unsigned char p0[24], p1[24], q[4][12], flat[48];
    fill(p0, 24, 4), fill(p1, 24, 5);
    memcpy(flat, p0, 24), memcpy(flat + 24, p1, 24);
    const void *srcs[] = {p0, p1};
    uint64_t offs[] = {4000, 4100, 4200};
    CHECK(amnet_put_indexed(next, offs, 3, 16, srcs, 2, 24));
    void *dsts[] = {q[0], q[1], q[2], q[3]};
    CHECK(amnet_get_indexed(next, offs, 3, 16, dsts, 4, 12));
    if (memcmp(q, flat, 48))
        FAIL("indexed put then get differ");
    CHECK(amnet_put_indexed_nb(next, offs, 3, 16, srcs, 2, 24, &h));
    CHECK(amnet_sync(&h));
    uint64_t local_offs[] = {LOCAL + 100, LOCAL + 124};
    CHECK(amnet_get_indexed_nb_local(next, offs, 3, 16, local_offs, 2, 24, &h));
    CHECK(amnet_sync(&h));
    if (memcmp(seg + LOCAL + 100, flat, 48))
        FAIL("indexed get_nb_local differs");

    /* Strided: 8 rows of 16 bytes; rows 16 apart here, 64 apart there, 20 apart coming back. */
    unsigned char m[8 * 16], m2[8 * 20];
    fill(m, sizeof m, 6);
    uint64_t rstride[] = {64};
    size_t lstride[] = {16}, lstride2[] = {20}, count[] = {16, 8};
    CHECK(amnet_put_strided(next, 8000, rstride, m, lstride, count, 1));
    memset(m2, 0, sizeof m2);
    CHECK(amnet_get_strided(next, 8000, rstride, m2, lstride2, count, 1));
    for (int r = 0; r < 8; r++)
        if (memcmp(m2 + 20 * r, m + 16 * r, 16))
            FAIL("strided row %d differs", r);
    fill(m, sizeof m, 7);
    CHECK(amnet_put_strided_nb(next, 8000, rstride, m, lstride, count, 1, &h));
    CHECK(amnet_sync(&h));
    uint64_t seg_stride[] = {32};
    CHECK(amnet_get_strided_nb_local(next, 8000, rstride, LOCAL + 1000, seg_stride, count, 1, &h));
    CHECK(amnet_sync(&h));
    for (int r = 0; r < 8; r++)
        if (memcmp(seg + LOCAL + 1000 + 32 * r, m + 16 * r, 16))
            FAIL("strided get_nb_local row %d differs", r);

    /* Errors. */
    amnet_buf_t overlapping[] = {{back, 20}, {back + 10, 20}};
    EXPECT(amnet_get_vector(next, dst, 2, overlapping, 2), AMNET_ERR_BAD_ARG);
    if (!strstr(amnet_last_error(), "overlap"))
        FAIL("the overlap's message: %s", amnet_last_error());
    amnet_cbuf_t short_src[] = {{a, 10}};
    EXPECT(amnet_put_vector(next, dst, 2, short_src, 1), AMNET_ERR_USAGE);
    amnet_range_t outside[] = {{SEG - 10, 40}};
    EXPECT(amnet_put_vector(next, outside, 1, src, 3), AMNET_ERR_USAGE);
    if (!strstr(amnet_last_error(), "piece 0 of 1"))
        FAIL("the range's message: %s", amnet_last_error());
    EXPECT(amnet_put_indexed(next, NULL, 3, 16, srcs, 2, 24), AMNET_ERR_BAD_ARG);

    CHECK(amnet_barrier());
    printf("vis: rank %u of %u: ok\n", me, nranks);
    CHECK(amnet_barrier());
    return 0;
}
