/* cpu_lane_mix.h — test support of cpu_lane_mix.c (its ops are declared in cpu_ops.h with the
 * others): the magnitudes of the lane lambdas' gradients, which test_gpu_step.c's bound for
 * those gradients needs (sums over every element with much cancellation, docs/cuda.md
 * "Residual stream"). */
#ifndef CT_CPU_LANE_MIX_H
#define CT_CPU_LANE_MIX_H

/* While mag is set (NULL: off, the default), each cpu_lane_mix_backward also adds, for each of
 * the six lambdas, the sum over every element of |term| of its gradient (|d0*l0|, ...: the
 * terms the backward sums, in double) into mag[k], k the index of that gradient in grads
 * (the backward's dresid and dpost must point into grads). Not thread-safe: one backend at a
 * time, and nothing else running cpu_lane_mix_backward meanwhile. */
void cpu_lane_mix_track_magnitudes(const float *grads, double *mag);

#endif
