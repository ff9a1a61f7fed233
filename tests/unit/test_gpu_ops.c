/* test_gpu_ops.c — every CUDA op against its CPU reference: one case per row of the op table
 * (gpu_op_table.h; named <op>_<shape>, e.g. rmsnorm_fwd_ragged), each run the same way
 * (gpu_ops.h): random inputs, outputs poisoned with NaN, every output compared with the CPU op
 * under its bound, the op run twice for the same bytes, then the op's own checks (in-place and
 * fused forms bitwise the ops they replace, refused arguments). Rules in test_gpu.h: without a
 * device every case SKIPs (the host-only embedding_index case still runs); CT_TEST_CASES picks
 * cases (tests/gpu_emu/run.sh ops:case,case). The whole-step and optimizer tests are
 * test_gpu_step.c and test_gpu_optim.c; the same table is timed by tests/bench/bench_gpu_ops.c.
 * Usage: test_gpu_ops [--quick] [--list]
 *   --quick  leaves out the rows marked CASE_SLOW (the host emulator's quick set)
 *   --list   prints the names of the cases it would run, and runs none */
#include "gpu_op_table.h"

#ifndef CT_HAVE_CUDA
GPU_TEST_MAIN_WITHOUT_CUDA()
#else

static const OpCase *current_case;
static void run_current_case(void) { op_test_case(current_case); }

int main(int argc, char **argv) {
    int quick = 0, list = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) quick = 1;
        else if (strcmp(argv[i], "--list") == 0) list = 1;
        else {
            fprintf(stderr, "usage: %s [--quick] [--list]\n", TEST_PROGRAM);
            return 2;
        }
    }
    char name[128];
    for (size_t i = 0; i < gpu_op_count; i++) {
        const OpCase *c = &gpu_op_cases[i];
        if (!(c->flags & CASE_TEST) || (quick && (c->flags & CASE_SLOW))) continue;
        op_case_name(c, name, sizeof name);
        if (list) {
            printf("%s\n", name);
            continue;
        }
        current_case = c;
        harness_run(TEST_PROGRAM, name, run_current_case);
    }
    if (list) return 0;
    TEST_EXIT();
}

#endif
