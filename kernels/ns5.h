/* ns5.h — the constants of train_gpt.py's Newton–Schulz iteration (zeropower_via_newtonschulz5),
 * shared by the CPU (cpu/cpu_optim_ns.c) and CUDA (cuda/cuda_optim.cu) versions so both run the
 * same polynomial. */
#ifndef CT_NS5_H
#define CT_NS5_H

/* The quintic iteration's coefficients (train_gpt.py: a, b, c). */
#define NS5_A 3.4445f
#define NS5_B (-4.7750f)
#define NS5_C 2.0315f
/* Added to ||G||_F before dividing, as train_gpt.py's eps. */
#define NS5_EPS 1e-7f

#endif
