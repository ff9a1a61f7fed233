/* test_isolate.c — ct_run_isolated (base/isolate.h): a check run in a child process
 * returns its result, payload and message; a crash or a hang in it becomes an error of the
 * caller, who goes on. */
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "harness.h"
#include "isolate.h"

typedef struct {
    int value;
    char text[32];
} Payload;

static int succeeds(void *ctx, void *out) {
    Payload *p = out;
    p->value = *(int *)ctx * 2;
    snprintf(p->text, sizeof p->text, "from the child");
    return 0;
}

static int fails(void *ctx, void *out) {
    (void)out;
    return ct_fail("bad input %d: expected something else", *(int *)ctx);
}

static int crashes(void *ctx, void *out) {
    (void)ctx;
    (void)out;
    raise(SIGSEGV);
    return 0;
}

static int hangs(void *ctx, void *out) {
    (void)ctx;
    (void)out;
    for (;;) pause();
    return 0;
}

static int exits(void *ctx, void *out) {
    (void)ctx;
    (void)out;
    _exit(3);
}

static void result_and_payload_come_back(void) {
    int in = 21;
    Payload p = {0, ""};
    CHECK(ct_run_isolated("doubling", succeeds, &in, &p, sizeof p, 10) == 0, "%s", ct_error());
    CHECK(p.value == 42 && !strcmp(p.text, "from the child"), "payload %d '%s'", p.value, p.text);
}

static void failure_message_comes_back(void) {
    int in = 7;
    CHECK(ct_run_isolated("checking", fails, &in, NULL, 0, 10) != 0, "a failure was reported as success");
    CHECK(!strcmp(ct_error(), "bad input 7: expected something else"), "message: %s", ct_error());
}

static void crash_is_an_error(void) {
    CHECK(ct_run_isolated("checking 'x.h5'", crashes, NULL, NULL, 0, 10) != 0, "a crash was reported as success");
    /* signal 11, or 6 where a sanitizer catches the fault and aborts */
    CHECK(strstr(ct_error(), "checking 'x.h5' crashed (signal "), "message: %s", ct_error());
}

static void hang_is_stopped(void) {
    double t0 = ct_now_ms();
    CHECK(ct_run_isolated("waiting", hangs, NULL, NULL, 0, 0.3) != 0, "a hang was reported as success");
    double ms = ct_now_ms() - t0;
    CHECK(strstr(ct_error(), "waiting did not finish within 0.3 s"), "message: %s", ct_error());
    CHECK(ms >= 250 && ms < 5000, "took %.0f ms", ms);
}

static void early_exit_is_an_error(void) {
    CHECK(ct_run_isolated("checking", exits, NULL, NULL, 0, 10) != 0, "an early exit was reported as success");
    CHECK(strstr(ct_error(), "ended without a result (exit status 3)"), "message: %s", ct_error());
}

int main(void) {
    RUN(result_and_payload_come_back);
    RUN(failure_message_comes_back);
    RUN(crash_is_an_error);
    RUN(hang_is_stopped);
    RUN(early_exit_is_an_error);
    TEST_EXIT();
}
