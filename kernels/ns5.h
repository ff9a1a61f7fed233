/* ns5.h — the constants of Muon's Newton–Schulz iteration, shared by the CPU
 * (cpu/cpu_optim_ns.c) and CUDA (cuda/cuda_optim.cu) versions so both run the same polynomials:
 * train_gpt.py's fixed quintic (zeropower_via_newtonschulz5) and the 1.0611 record's Polar
 * Express triples, one per iteration (muon_polar_express). */
#ifndef CT_NS5_H
#define CT_NS5_H

/* The quintic iteration's coefficients (train_gpt.py: a, b, c). */
#define NS5_A 3.4445f
#define NS5_B (-4.7750f)
#define NS5_C 2.0315f
/* Added to ||G||_F before dividing, as train_gpt.py's eps. */
#define NS5_EPS 1e-7f

/* Polar Express (the 1.0611 record, its PR #1344): iteration k uses triple k; at most this many
 * iterations (config.c refuses muon_backend_steps above it with muon_polar_express). */
#define NS_POLAR_EXPRESS_STEPS 5

/* MuonEq-R's floor of a row's norm (muon_row_normalize): rows are divided by max(||row||, this). */
#define NS_ROW_NORM_EPS 1e-7f

/* Muon's options (the `flags` of cpu_muon_compute_update / cuda_muon_update_batch); 0 = the
 * baseline's Muon. */
#define CT_MUON_POLAR_EXPRESS 1 /* Polar Express coefficients (muon_polar_express) */
#define CT_MUON_ROW_NORMALIZE 2 /* MuonEq-R before Newton-Schulz (muon_row_normalize) */

/* The iterations run for `steps` asked: with Polar Express at most its triples (the record's
 * slice of its table; config.c refuses more, so this only guards the kernels). */
static inline int ns_iterations(int polar_express, int steps) {
    return polar_express && steps > NS_POLAR_EXPRESS_STEPS ? NS_POLAR_EXPRESS_STEPS : steps;
}

/* The (a, b, c) of iteration `step` (0-based, below ns_iterations): the quintic's for every
 * step, or Polar Express's triple `step`, each rounded to fp32 once, as the products take them
 * (torch hands a Python float to a bf16/fp32 kernel as a float scalar). */
static inline void ns_coefficients(int polar_express, int step, float *a, float *b, float *c) {
    static const double pe[NS_POLAR_EXPRESS_STEPS][3] = {
        {8.156554524902461, -22.48329292557795, 15.878769915207462},
        {4.042929935166739, -2.808917465908714, 0.5000178451051316},
        {3.8916678022926607, -2.772484153217685, 0.5060648178503393},
        {3.285753657755655, -2.3681294933425376, 0.46449024233003106},
        {2.3465413258596377, -1.7097828382687081, 0.42323551169305323},
    };
    if (!polar_express || step < 0 || step >= NS_POLAR_EXPRESS_STEPS) {
        *a = NS5_A, *b = NS5_B, *c = NS5_C;
        return;
    }
    *a = (float)pe[step][0], *b = (float)pe[step][1], *c = (float)pe[step][2];
}

#endif
