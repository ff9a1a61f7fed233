/* progress.c — the terminal progress bar of progress.h. */
#include "progress.h"

#include <stdio.h>
#include <string.h>

#include "common.h"

#define BAR_WIDTH 28
#define REDRAW_INTERVAL_MS 100.0

void progress_begin(Progress *p, const char *label, const char *unit, int64_t total) {
    memset(p, 0, sizeof *p);
    snprintf(p->label, sizeof p->label, "%s", label);
    p->unit = unit;
    p->total = total;
    p->enabled = ct_stderr_is_tty();
    p->start_ms = ct_now_ms();
    p->last_draw_ms = -1e300;
}

/* 1234567 -> "1.23M": short enough for one terminal line. */
static void human_count(double v, char *buf, size_t cap) {
    const char *suffix[] = {"", "k", "M", "G", "T"};
    int i = 0;
    while (v >= 1000.0 && i < 4) {
        v /= 1000.0;
        i++;
    }
    snprintf(buf, cap, i ? "%.2f%s" : "%.0f%s", v, suffix[i]);
}

void progress_update(Progress *p, int64_t done) {
    if (!p->enabled) return;
    double now = ct_now_ms();
    int finished = p->total > 0 && done >= p->total;
    if (!finished && now - p->last_draw_ms < REDRAW_INTERVAL_MS) return;
    p->last_draw_ms = now;
    double seconds = (now - p->start_ms) / 1e3;
    char count[32], total[32], rate[32];
    human_count((double)done, count, sizeof count);
    human_count((double)p->total, total, sizeof total);
    human_count(seconds > 0 ? (double)done / seconds : 0.0, rate, sizeof rate);
    if (p->total > 0) {
        double fraction = (double)done / (double)p->total;
        if (fraction > 1) fraction = 1;
        char bar[BAR_WIDTH + 1];
        int filled = (int)(fraction * BAR_WIDTH);
        for (int i = 0; i < BAR_WIDTH; i++) bar[i] = i < filled ? '#' : '.';
        bar[BAR_WIDTH] = '\0';
        /* \033[K clears the rest of the line when the new text is shorter than the old. */
        fprintf(stderr, "\r%s [%s] %3.0f%% %s/%s %s, %s/s\033[K", p->label, bar, fraction * 100, count, total,
                p->unit, rate);
    } else {
        fprintf(stderr, "\r%s %s %s, %s/s\033[K", p->label, count, p->unit, rate);
    }
    fflush(stderr);
}

void progress_end(Progress *p) {
    if (!p->enabled) return;
    fprintf(stderr, "\r\033[K");
    fflush(stderr);
}
