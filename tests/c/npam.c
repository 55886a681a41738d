/* Negotiated-payload requests: Medium and Long payloads built in the buffer amnet hands out,
 * committed with fewer bytes than prepared and with arguments; a cancelled one sends nothing;
 * a thread holding a prepared request may not wait or prepare another; commit without one is
 * refused, as is a length beyond the prepared size. And prepared replies: committed, cancelled
 * before an ordinary reply, and left behind by the handler. */
#include "check.h"

enum { H = 200, SEG = 64 * 1024 };

static uint32_t hits, bytes_seen;

static void on_msg(amnet_token_t *tok, const uint32_t *args, size_t nargs, const void *payload,
                   size_t nbytes) {
    uint32_t src;
    CHECK(amnet_token_source(tok, &src));
    if (nargs != 2 || args[0] != src || args[1] != nbytes)
        FAIL("a prepared message with %zu arguments and %zu bytes", nargs, nbytes);
    const unsigned char *p = payload;
    for (size_t i = 0; i < nbytes; i++)
        if (p[i] != (unsigned char)(i ^ src))
            FAIL("byte %zu of a prepared payload is wrong", i);
    __atomic_fetch_add(&bytes_seen, (uint32_t)nbytes, __ATOMIC_RELAXED);
    __atomic_fetch_add(&hits, 1, __ATOMIC_RELEASE);
}

enum { H_ASK = 201, H_ANS = 202 };
static uint32_t answers, answer_bytes;

/* args[0]: 0 commit a prepared reply of args[1] bytes, 1 cancel it and reply plainly, 2 leave
 * it behind (no reply). */
static void on_ask(amnet_token_t *tok, const uint32_t *args, size_t nargs, const void *p,
                   size_t n) {
    (void)p, (void)n, (void)nargs;
    unsigned char *buf;
    CHECK(amnet_prepare_reply_medium(tok, H_ANS, 4096, (void **)&buf));
    EXPECT(amnet_prepare_reply_medium(tok, H_ANS, 1, (void **)&buf), AMNET_ERR_STATE);
    EXPECT(amnet_reply_short(tok, H_ANS, NULL, 0), AMNET_ERR_STATE);
    uint32_t src;
    CHECK(amnet_token_source(tok, &src));
    if (args[0] == 0) {
        for (uint32_t i = 0; i < args[1]; i++)
            buf[i] = (unsigned char)(i ^ me);
        EXPECT(amnet_commit_reply(tok, args, 2, 4097), AMNET_ERR_USAGE);
        /* A failed commit spends the buffer: prepare again. */
        CHECK(amnet_prepare_reply_medium(tok, H_ANS, 4096, (void **)&buf));
        for (uint32_t i = 0; i < args[1]; i++)
            buf[i] = (unsigned char)(i ^ me);
        CHECK(amnet_commit_reply(tok, args, 2, args[1]));
        EXPECT(amnet_reply_short(tok, H_ANS, NULL, 0), AMNET_ERR_REPLY);
    } else if (args[0] == 1) {
        CHECK(amnet_cancel_reply(tok));
        EXPECT(amnet_cancel_reply(tok), AMNET_ERR_STATE);
        uint32_t a[] = {1, 0};
        CHECK(amnet_reply_medium(tok, H_ANS, a, 2, NULL, 0));
    }
}

static void on_ans(amnet_token_t *tok, const uint32_t *args, size_t nargs, const void *payload,
                   size_t nbytes) {
    uint32_t src;
    CHECK(amnet_token_source(tok, &src));
    unsigned char *buf;
    EXPECT(amnet_prepare_reply_medium(tok, H_ANS, 1, (void **)&buf), AMNET_ERR_REPLY);
    if (nargs != 2 || args[1] != nbytes)
        FAIL("an answer with %zu arguments and %zu bytes", nargs, nbytes);
    const unsigned char *p = payload;
    for (size_t i = 0; i < nbytes; i++)
        if (p[i] != (unsigned char)(i ^ src))
            FAIL("byte %zu of a prepared reply is wrong", i);
    __atomic_fetch_add(&answer_bytes, (uint32_t)nbytes, __ATOMIC_RELAXED);
    __atomic_fetch_add(&answers, 1, __ATOMIC_RELEASE);
}

static void fill(unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i ^ me);
}

int main(void) {
    start();
    amnet_handler_entry_t table[] = {{H, on_msg}, {H_ASK, on_ask}, {H_ANS, on_ans}};
    CHECK(amnet_attach(table, 3, SEG));
    uint32_t next = (me + 1) % nranks;
    size_t maxm;
    CHECK(amnet_max_medium(&maxm));
    EXPECT(amnet_commit_request(NULL, 0, 0), AMNET_ERR_STATE);
    EXPECT(amnet_cancel_request(), AMNET_ERR_STATE);
    uint32_t sent = 0, sent_bytes = 0;
    size_t lens[] = {0, 1, 100, 1000, maxm};
    for (int i = 0; i < 5; i++) {
        unsigned char *buf;
        CHECK(amnet_prepare_request_medium(next, H, lens[i], (void **)&buf));
        /* Holding it: no wait, no second prepare. */
        EXPECT(amnet_wait_word(&hits, AMNET_CMP_GT, 1u << 30), AMNET_ERR_USAGE);
        EXPECT(amnet_prepare_request_medium(next, H, 1, (void **)&buf), AMNET_ERR_STATE);
        size_t len = lens[i] / 2 + (lens[i] & 1);
        fill(buf, len);
        uint32_t args[] = {me, (uint32_t)len};
        CHECK(amnet_commit_request(args, 2, len));
        sent++, sent_bytes += (uint32_t)len;
    }
    /* Long, landing at 1000 in the next rank's segment. */
    unsigned char *buf;
    CHECK(amnet_prepare_request_long(next, H, 5000, 1000, (void **)&buf));
    fill(buf, 4000);
    uint32_t args[] = {me, 4000};
    CHECK(amnet_commit_request(args, 2, 4000));
    sent++, sent_bytes += 4000;
    /* Cancelled, and a commit beyond the prepared size: nothing sent. */
    CHECK(amnet_prepare_request_medium(next, H, 10, (void **)&buf));
    CHECK(amnet_cancel_request());
    CHECK(amnet_prepare_request_medium(next, H, 10, (void **)&buf));
    EXPECT(amnet_commit_request(args, 2, 11), AMNET_ERR_USAGE);
    EXPECT(amnet_prepare_request_long(next, H, 100, SEG - 10, (void **)&buf),
           AMNET_ERR_OUT_OF_SEGMENT);
    EXPECT(amnet_prepare_request_medium(next, H, maxm + 1, (void **)&buf), AMNET_ERR_TOO_LARGE);
    /* Every rank receives what the previous one sent. */
    CHECK(amnet_wait_word(&hits, AMNET_CMP_EQ, sent));
    /* Prepared replies: committed (0, 1 and 4000 bytes), cancelled, left behind. */
    uint32_t asks[][2] = {{0, 0}, {0, 1}, {0, 4000}, {1, 0}, {2, 0}};
    uint32_t want = 0, want_bytes = 0;
    for (int i = 0; i < 5; i++) {
        CHECK(amnet_request_short(next, H_ASK, asks[i], 2));
        if (asks[i][0] != 2) {
            want++, want_bytes += asks[i][1];
            CHECK(amnet_wait_word(&answers, AMNET_CMP_EQ, want));
        }
    }
    if (answer_bytes != want_bytes)
        FAIL("%u answer bytes, wanted %u", answer_bytes, want_bytes);
    CHECK(amnet_barrier());
    if (__atomic_load_n(&hits, __ATOMIC_ACQUIRE) != sent || bytes_seen != sent_bytes)
        FAIL("%u messages of %u bytes arrived, wanted %u of %u", hits, bytes_seen, sent,
             sent_bytes);
    printf("npam: rank %u of %u: ok\n", me, nranks);
    CHECK(amnet_barrier());
    return 0;
}
