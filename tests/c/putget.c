/* Put/get of sizes 1 B to 1 MiB at misaligned offsets on both sides, in every form: blocking,
 * explicit handle (sync and try-sync), implicit handle, an access region and sync-all. Each
 * rank writes only into the next rank's segment, reads it back and compares; after a barrier
 * it checks in its own segment what the previous rank wrote last. */
#include "check.h"

enum { MIB = 1 << 20, SEG = MIB + 64 };

static const size_t sizes[] = {1,    2,     3,     5,     8,     13,         64,
                               100,  1000,  4095,  4096,  4097,  65535,      65536,
                               65537, 100003, 262147, MIB - 1, MIB};
static const size_t offsets[] = {0, 1, 3, 7};

/* Byte j of the data rank `rank` writes in step `step`. */
static unsigned char pattern(uint32_t rank, size_t step, size_t j) {
    return (unsigned char)(j * 31 + step * 7 + rank * 101 + 1);
}

static void fill(unsigned char *p, uint32_t rank, size_t step, size_t size) {
    for (size_t j = 0; j < size; j++)
        p[j] = pattern(rank, step, j);
}

static void compare(const unsigned char *p, uint32_t rank, size_t step, size_t size,
                    const char *form) {
    for (size_t j = 0; j < size; j++)
        if (p[j] != pattern(rank, step, j))
            FAIL("%s of %zu bytes: byte %zu is %u, wanted %u", form, size, j, p[j],
                 pattern(rank, step, j));
}

int main(void) {
    start();
    CHECK(amnet_attach(NULL, 0, SEG));
    uint32_t next = (me + 1) % nranks, prev = (me + nranks - 1) % nranks;
    size_t seg_len;
    CHECK(amnet_segment_size_of(next, &seg_len));
    if (seg_len != SEG)
        FAIL("segment of %zu bytes, wanted %d", seg_len, SEG);
    /* The host map: this rank among its host's ranks, on its own host. */
    const uint32_t *peers;
    uint32_t count, index, hosts, host, peer_host;
    CHECK(amnet_host_info(&peers, &count, &index));
    if (index >= count || peers[index] != me)
        FAIL("host_info: index %u of %u does not name rank %u", index, count, me);
    CHECK(amnet_host_of(me, &hosts, &host));
    for (uint32_t i = 0; i < count; i++) {
        CHECK(amnet_host_of(peers[i], NULL, &peer_host));
        if (peer_host != host || (i > 0 && peers[i] <= peers[i - 1]))
            FAIL("host_info: rank %u listed on host %u, rank %u's host is %u", peers[i],
                 peer_host, me, host);
    }
    if (hosts < 1 || host >= hosts)
        FAIL("host %u of %u hosts", host, hosts);
    if (amnet_host_of(nranks, NULL, NULL) != AMNET_ERR_BAD_RANK)
        FAIL("amnet_host_of(%u) of a job of %u ranks did not fail with BAD_RANK", nranks, nranks);
    unsigned char *src = malloc(MIB + 16), *dst = malloc(MIB + 16);
    size_t n = sizeof sizes / sizeof sizes[0], ops = 0;
    for (size_t s = 0; s < n; s++) {
        size_t size = sizes[s];
        for (size_t o = 0; o < sizeof offsets / sizeof offsets[0]; o++) {
            size_t off = offsets[o], loc = offsets[(o + 1) % 4];
            unsigned char *from = src + loc, *to = dst + off;
            /* Blocking. */
            fill(from, me, 3 * s, size);
            CHECK(amnet_put(next, off, from, size));
            memset(to, 0, size);
            CHECK(amnet_get(to, next, off, size));
            compare(to, me, 3 * s, size, "put then get");
            /* Explicit handles: sync, and try-sync until complete. */
            fill(from, me, 3 * s + 1, size);
            amnet_handle_t h;
            CHECK(amnet_put_nb(next, off, from, size, &h));
            memset(from, 0, size); /* the source may be reused at once */
            CHECK(amnet_sync(&h));
            if (h != AMNET_HANDLE_INVALID)
                FAIL("a synced handle is not reset");
            memset(to, 0, size);
            CHECK(amnet_get_nb(to, next, off, size, &h));
            int rc;
            while ((rc = amnet_try_sync(&h)) == AMNET_NOT_READY)
                ;
            CHECK(rc);
            compare(to, me, 3 * s + 1, size, "put_nb then get_nb");
            amnet_handle_t stale = 1; /* never made */
            EXPECT(amnet_sync(&stale), AMNET_ERR_BAD_HANDLE);
            /* Implicit handles. */
            fill(from, me, 3 * s + 2, size);
            CHECK(amnet_put_nbi(next, off, from, size));
            CHECK(amnet_sync_nbi());
            memset(to, 0, size);
            CHECK(amnet_get_nbi(to, next, off, size));
            while ((rc = amnet_try_sync_nbi()) == AMNET_NOT_READY)
                ;
            CHECK(rc);
            compare(to, me, 3 * s + 2, size, "put_nbi then get_nbi");
            ops += 6;
        }
        /* An access region around a put and a get of two halves, then sync-all. */
        size_t half = size / 2;
        fill(src, me, 1000, size);
        CHECK(amnet_begin_nbi_region());
        CHECK(amnet_put_nbi(next, 0, src, half));
        CHECK(amnet_put_nbi(next, half, src + half, size - half));
        amnet_handle_t hs[3] = {AMNET_HANDLE_INVALID};
        CHECK(amnet_end_nbi_region(&hs[0]));
        CHECK(amnet_sync_all(hs, 3));
        memset(dst, 0, size);
        CHECK(amnet_get_nb(dst, next, 0, half, &hs[1]));
        CHECK(amnet_get_nb(dst + half, next, half, size - half, &hs[2]));
        CHECK(amnet_sync_all(hs, 3));
        for (int i = 0; i < 3; i++)
            if (hs[i] != AMNET_HANDLE_INVALID)
                FAIL("sync_all left handle %d set", i);
        compare(dst, me, 1000, size, "access region and sync_all");
        ops += 4;
    }
    /* Out of the segment: refused, nothing moved. */
    EXPECT(amnet_put(next, SEG - 3, src, 4), AMNET_ERR_OUT_OF_SEGMENT);
    EXPECT(amnet_get(dst, next, SEG, 1), AMNET_ERR_OUT_OF_SEGMENT);
    EXPECT(amnet_put(nranks, 0, src, 4), AMNET_ERR_BAD_RANK);
    CHECK(amnet_barrier());
    /* The last write into this rank's segment was the previous rank's full MiB. */
    unsigned char *seg;
    CHECK(amnet_segment((void **)&seg, NULL));
    compare(seg, prev, 1000, MIB, "the previous rank's last put, read locally");
    printf("putget: rank %u of %u: %zu operations ok\n", me, nranks, ops);
    free(src);
    free(dst);
    CHECK(amnet_barrier());
    return 0;
}
