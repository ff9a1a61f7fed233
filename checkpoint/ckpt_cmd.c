/* ckpt_cmd.c — `ctrain ckpt` (being written). */
#include <stdio.h>

#include "checkpoint.h"
#include "common.h"

int ckpt_main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "ctrain: error: ckpt: not implemented yet\n");
    return CT_EXIT_FAILURE;
}
