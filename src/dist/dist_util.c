/* dist_util.c — the pure parts of the distributed layer (no PMI, no MPI, no environment):
 * PMI_process_mapping and SLURM_STEP_TASKS_PER_NODE parsers, layout from a rank->node table,
 * hex encoding for KVS values, and the rank-map line. Unit-tested in tests/unit/test_dist.c. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "dist.h"
#include "dist_internal.h"

/* ---- PMI_process_mapping ---- */

typedef struct {
    const char *s; /* whole string, for messages */
    const char *p; /* cursor */
} Cursor;

static void skip_ws(Cursor *c) {
    while (*c->p == ' ' || *c->p == '\t' || *c->p == '\n') c->p++;
}

static int expect_char(Cursor *c, char ch) {
    skip_ws(c);
    if (*c->p != ch)
        return ct_fail("PMI_process_mapping '%s': expected '%c' at offset %d", c->s, ch,
                       (int)(c->p - c->s));
    c->p++;
    return 0;
}

/* A non-negative number below 2^24: node counts and ranks per node in any real job are far
 * below, and the bound keeps nodes * ppn products in range. */
static int expect_number(Cursor *c, const char *what, long *out) {
    skip_ws(c);
    if (!isdigit((unsigned char)*c->p))
        return ct_fail("PMI_process_mapping '%s': expected %s (a number) at offset %d", c->s, what,
                       (int)(c->p - c->s));
    long v = 0;
    while (isdigit((unsigned char)*c->p)) {
        v = v * 10 + (*c->p - '0');
        if (v >= (1L << 24))
            return ct_fail("PMI_process_mapping '%s': %s too large at offset %d", c->s, what,
                           (int)(c->p - c->s));
        c->p++;
    }
    *out = v;
    return 0;
}

int dist_parse_process_mapping(const char *s, int world_size, int *node_of_rank) {
    if (!s) return ct_fail("PMI_process_mapping missing");
    if (world_size < 1) return ct_fail("PMI_process_mapping: world size %d", world_size);
    Cursor c = {s, s};
    if (expect_char(&c, '(') < 0) return -1;
    skip_ws(&c);
    if (strncmp(c.p, "vector", 6) != 0)
        return ct_fail("PMI_process_mapping '%s': expected '(vector,' at the start", s);
    c.p += 6;

    /* Pass 1 validates and counts the blocks; pass 2 places the ranks. */
    const char *blocks_start = c.p;
    long per_cycle = 0;
    int nblocks = 0;
    for (;;) {
        skip_ws(&c);
        if (*c.p == ')') break;
        long start, nodes, ppn;
        if (expect_char(&c, ',') < 0 || expect_char(&c, '(') < 0 ||
            expect_number(&c, "start node", &start) < 0 || expect_char(&c, ',') < 0 ||
            expect_number(&c, "node count", &nodes) < 0 || expect_char(&c, ',') < 0 ||
            expect_number(&c, "ranks per node", &ppn) < 0 || expect_char(&c, ')') < 0)
            return -1;
        if (nodes == 0 || ppn == 0)
            return ct_fail("PMI_process_mapping '%s': block %d has %ld nodes x %ld ranks (must be > 0)",
                           s, nblocks + 1, nodes, ppn);
        if (start + nodes > world_size)
            return ct_fail("PMI_process_mapping '%s': block %d names node %ld, more nodes than the %d ranks",
                           s, nblocks + 1, start + nodes - 1, world_size);
        per_cycle += nodes * ppn;
        if (per_cycle > (1L << 40)) return ct_fail("PMI_process_mapping '%s': too many ranks", s);
        nblocks++;
    }
    c.p++; /* the closing ')' */
    skip_ws(&c);
    if (*c.p) return ct_fail("PMI_process_mapping '%s': unexpected text after the vector", s);
    if (nblocks == 0) return ct_fail("PMI_process_mapping '%s': no (start,nodes,ppn) blocks", s);

    int rank = 0;
    while (rank < world_size) {
        Cursor b = {s, blocks_start};
        for (int k = 0; k < nblocks && rank < world_size; k++) {
            long start, nodes, ppn;
            /* Already validated: these cannot fail. */
            expect_char(&b, ',');
            expect_char(&b, '(');
            expect_number(&b, "", &start);
            expect_char(&b, ',');
            expect_number(&b, "", &nodes);
            expect_char(&b, ',');
            expect_number(&b, "", &ppn);
            expect_char(&b, ')');
            for (long node = start; node < start + nodes && rank < world_size; node++)
                for (long j = 0; j < ppn && rank < world_size; j++) node_of_rank[rank++] = (int)node;
        }
    }
    return 0;
}

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

int dist_layout_from_nodes(const int *node_of_rank, int world_size, int rank, int *local_rank,
                           int *local_size, int *node_index, int *num_nodes) {
    if (world_size < 1 || rank < 0 || rank >= world_size)
        return ct_fail("rank %d outside world of %d", rank, world_size);
    int mine = node_of_rank[rank];
    int lr = 0, ls = 0;
    for (int r = 0; r < world_size; r++) {
        if (node_of_rank[r] < 0) return ct_fail("rank %d has no node (id %d)", r, node_of_rank[r]);
        if (node_of_rank[r] == mine) {
            if (r < rank) lr++;
            ls++;
        }
    }
    /* Node index = position of this node's id among the distinct ids, so ids need not be
     * dense; with Slurm's mappings they are 0..N-1 and the index is the id. */
    int *ids = ct_malloc((size_t)world_size * sizeof *ids, "node ids");
    memcpy(ids, node_of_rank, (size_t)world_size * sizeof *ids);
    qsort(ids, (size_t)world_size, sizeof *ids, cmp_int);
    int distinct = 0, index = -1;
    for (int i = 0; i < world_size; i++) {
        if (i > 0 && ids[i] == ids[i - 1]) continue;
        if (ids[i] == mine) index = distinct;
        distinct++;
    }
    free(ids);
    *local_rank = lr;
    *local_size = ls;
    *node_index = index;
    *num_nodes = distinct;
    return 0;
}

/* ---- SLURM_STEP_TASKS_PER_NODE: "2(x3),1" = 2,2,2,1 ---- */

int dist_tasks_on_node(const char *s, int node_index) {
    if (!s || !*s) return ct_fail("tasks-per-node list is empty");
    if (node_index < 0) return ct_fail("node index %d", node_index);
    const char *p = s;
    int node = 0;
    for (;;) {
        if (!isdigit((unsigned char)*p))
            return ct_fail("tasks-per-node list '%s': expected a number at offset %d", s, (int)(p - s));
        long count = strtol(p, (char **)&p, 10);
        long repeat = 1;
        if (*p == '(') {
            if (p[1] != 'x' || !isdigit((unsigned char)p[2]))
                return ct_fail("tasks-per-node list '%s': expected '(xN)' at offset %d", s, (int)(p - s));
            repeat = strtol(p + 2, (char **)&p, 10);
            if (*p != ')' || repeat < 1)
                return ct_fail("tasks-per-node list '%s': bad repeat at offset %d", s, (int)(p - s));
            p++;
        }
        if (count > INT_MAX) return ct_fail("tasks-per-node list '%s': count too large", s);
        if (node_index < node + repeat) return (int)count;
        node += (int)(repeat > INT_MAX - node ? INT_MAX - node : repeat);
        if (*p == '\0') break;
        if (*p != ',') return ct_fail("tasks-per-node list '%s': expected ',' at offset %d", s, (int)(p - s));
        p++;
    }
    return ct_fail("tasks-per-node list '%s' has %d nodes, no entry for node %d", s, node, node_index);
}

/* ---- hex ---- */

void dist_hex_encode(const void *data, size_t n, char *out) {
    static const char digits[] = "0123456789abcdef";
    const unsigned char *b = data;
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[b[i] >> 4];
        out[2 * i + 1] = digits[b[i] & 15];
    }
    out[2 * n] = '\0';
}

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

int dist_hex_decode(const char *hex, void *data, size_t n) {
    size_t len = strlen(hex);
    if (len != 2 * n) return ct_fail("hex value has %zu digits, expected %zu", len, 2 * n);
    unsigned char *b = data;
    for (size_t i = 0; i < n; i++) {
        int hi = hex_value(hex[2 * i]), lo = hex_value(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) return ct_fail("hex value has a non-hex character at offset %zu", 2 * i);
        b[i] = (unsigned char)(hi << 4 | lo);
    }
    return 0;
}

/* ---- the rank map line ---- */

void dist_entry_set(DistEntry *e, int rank, int local_rank, const char *host) {
    e->rank = rank;
    e->local_rank = local_rank;
    size_t n = 0;
    for (const char *p = host ? host : ""; *p && n + 1 < sizeof e->host; p++) {
        char c = *p;
        e->host[n++] = (isalnum((unsigned char)c) || c == '.' || c == '-' || c == '_') ? c : '_';
    }
    if (n == 0) e->host[n++] = '?';
    e->host[n] = '\0';
}

int dist_format_rank_map(const DistEntry *e, int n, char *buf, size_t cap) {
    static const char head[] = "rank map (rank=host/local_rank):";
    enum { TAIL_RESERVE = 32 }; /* room for " ... (+N more)" */
    if (cap < sizeof head + TAIL_RESERVE) return ct_fail("rank map buffer of %zu bytes is too small", cap);
    size_t len = (size_t)snprintf(buf, cap, "%s", head);
    for (int i = 0; i < n; i++) {
        char item[96];
        int m = snprintf(item, sizeof item, " %d=%s/%d", e[i].rank, e[i].host, e[i].local_rank);
        size_t need = (size_t)m + (i + 1 < n ? TAIL_RESERVE : 0);
        if (len + need >= cap) {
            snprintf(buf + len, cap - len, " ... (+%d more)", n - i);
            return 0;
        }
        memcpy(buf + len, item, (size_t)m + 1);
        len += (size_t)m;
    }
    return 0;
}
