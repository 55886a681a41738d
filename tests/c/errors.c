/* Error paths as C sees them: each bad call returns its code, and amnet_last_error names
 * what was wrong; nothing is sent, nothing hangs. */
#include "check.h"

static void expect_message(const char *word) {
    const char *m = amnet_last_error();
    if (!m || !strstr(m, word))
        FAIL("the last error \"%s\" does not mention \"%s\"", m ? m : "(null)", word);
}

static void on_request(amnet_token_t *tok, const uint32_t *args, size_t nargs,
                       const void *payload, size_t nbytes) {
    (void)args, (void)nargs, (void)payload, (void)nbytes;
    CHECK(amnet_reply_short(tok, 201, NULL, 0));
}

static volatile uint32_t replies;
static amnet_token_t *kept;

static void on_reply(amnet_token_t *tok, const uint32_t *args, size_t nargs,
                     const void *payload, size_t nbytes) {
    (void)args, (void)nargs, (void)payload, (void)nbytes;
    EXPECT(amnet_reply_short(tok, 201, NULL, 0), AMNET_ERR_REPLY);
    EXPECT(amnet_barrier(), AMNET_ERR_IN_HANDLER);
    kept = tok;
    replies++;
}

static volatile uint32_t late_hits;

static void on_late(amnet_token_t *tok, const uint32_t *args, size_t nargs,
                    const void *payload, size_t nbytes) {
    (void)tok, (void)args, (void)nargs, (void)payload, (void)nbytes;
    late_hits++;
}

int main(void) {
    uint32_t r;
    EXPECT(amnet_rank(&r), AMNET_ERR_NOT_INIT);
    expect_message("amnet_init");
    start();
    EXPECT(amnet_init(), AMNET_ERR_STATE);
    EXPECT(amnet_put(0, 0, "x", 1), AMNET_ERR_NOT_ATTACHED);
    expect_message("amnet_put");
    amnet_handler_entry_t bad[] = {{12, on_request}};
    EXPECT(amnet_attach(bad, 1, 4096), AMNET_ERR_BAD_HANDLER);
    expect_message("reserved");
    amnet_handler_entry_t table[] = {{200, on_request}, {201, on_reply}};
    CHECK(amnet_attach(table, 2, 4096));

    /* A rank that does not exist. */
    EXPECT(amnet_request_short(nranks + 5, 200, NULL, 0), AMNET_ERR_BAD_RANK);
    char want[64];
    snprintf(want, sizeof want, "rank %u does not exist", nranks + 5);
    expect_message(want);
    expect_message("amnet_request_short");
    EXPECT(amnet_get(&r, 4000000000u, 0, 4), AMNET_ERR_BAD_RANK);
    expect_message("4000000000");
    EXPECT(amnet_segment_size_of(nranks, &(size_t){0}), AMNET_ERR_BAD_RANK);
    /* Bad handlers, arguments and pointers. */
    EXPECT(amnet_request_short(0, 0, NULL, 0), AMNET_ERR_BAD_HANDLER);
    EXPECT(amnet_request_short(0, 999, NULL, 0), AMNET_ERR_BAD_HANDLER);
    expect_message("999");
    EXPECT(amnet_request_short(0, 202, NULL, 0), AMNET_ERR_BAD_HANDLER);
    expect_message("not registered");
    EXPECT(amnet_request_short(0, 200, NULL, 2), AMNET_ERR_BAD_ARG);
    expect_message("args is null");
    uint32_t args[20] = {0};
    EXPECT(amnet_request_short(0, 200, args, 20), AMNET_ERR_TOO_MANY_ARGS);
    expect_message("20 arguments");
    char bytes[128] = {0};
    EXPECT(amnet_put(0, 4000, bytes, 100), AMNET_ERR_OUT_OF_SEGMENT);
    expect_message("4000..4100");
    EXPECT(amnet_wait_word(NULL, AMNET_CMP_EQ, 0), AMNET_ERR_BAD_ARG);
    EXPECT(amnet_barrier_notify(0, 0xff), AMNET_ERR_BAD_ARG);
    expect_message("unknown bits");
    /* A token used after its handler returned. */
    CHECK(amnet_request_short(me, 200, NULL, 0));
    CHECK(amnet_wait_word((const uint32_t *)&replies, AMNET_CMP_EQ, 1));
    EXPECT(amnet_reply_short(kept, 201, NULL, 0), AMNET_ERR_BAD_TOKEN);
    expect_message("valid only inside its handler");
    /* A handler registered after attach, reached with an immediate request. */
    amnet_handler_entry_t late = {210, on_late};
    CHECK(amnet_register_handler(&late));
    EXPECT(amnet_register_handler(&late), AMNET_ERR_BAD_HANDLER);
    CHECK(amnet_barrier());
    uint32_t next = (me + 1) % nranks;
    int rc;
    while ((rc = amnet_try_request_short(next, 210, NULL, 0)) == AMNET_ERR_WOULD_BLOCK)
        CHECK(amnet_poll(NULL));
    CHECK(rc);
    CHECK(amnet_wait_word((const uint32_t *)&late_hits, AMNET_CMP_EQ, 1));
    int requested = -1, code = -1;
    CHECK(amnet_exit_requested(&requested, &code));
    if (requested != 0 || code != -1)
        FAIL("exit_requested says %d (code %d) while no rank asked", requested, code);
    if (strcmp(amnet_error_name(AMNET_ERR_BAD_RANK), "AMNET_ERR_BAD_RANK") ||
        strcmp(amnet_error_name(AMNET_OK), "AMNET_OK") ||
        strcmp(amnet_error_name(12345), "unknown status code"))
        FAIL("amnet_error_name gives wrong names");
    /* A wait refused (this thread holds a prepared request) before a get completed leaves the
     * get's handle outstanding; once the request is dropped, a sync waits for the get. */
    uint64_t mine = 0x1234abcd00ull + me, got = 0;
    CHECK(amnet_put(me, 64, &mine, sizeof mine));
    CHECK(amnet_barrier());
    amnet_handle_t h = AMNET_HANDLE_INVALID;
    CHECK(amnet_get_nb(&got, next, 64, sizeof got, &h));
    void *pbuf = NULL;
    CHECK(amnet_prepare_request_medium(next, 210, 8, &pbuf));
    rc = amnet_sync(&h);
    if (rc == AMNET_ERR_USAGE) {
        if (h == AMNET_HANDLE_INVALID)
            FAIL("a refused wait spent the handle of a get still in flight");
    } else {
        /* The get completed before the wait was needed (a direct copy on smp). */
        CHECK(rc);
    }
    CHECK(amnet_cancel_request());
    CHECK(amnet_sync(&h));
    if (h != AMNET_HANDLE_INVALID)
        FAIL("a completed get left its handle outstanding");
    if (got != 0x1234abcd00ull + next)
        FAIL("the get brought %#llx, rank %u holds %#llx", (unsigned long long)got, next,
             (unsigned long long)(0x1234abcd00ull + next));
    CHECK(amnet_barrier());
    printf("errors: rank %u of %u: ok\n", me, nranks);
    CHECK(amnet_barrier());
    return 0;
}
