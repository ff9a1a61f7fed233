/* backend_cuda_device.c — which GPU the CUDA backend uses: how many devices this process sees,
 * the rank's device from its place on its node (backend_pick_gpu, backend_common.h), and that
 * device's identity (UUID, PCI address) for the job's placement check. */
#include "backend_cuda.h"

#ifdef CT_HAVE_CUDA

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "common.h"

#include "backend_cuda_private.h"

int backend_cuda_visible(char *why, size_t cap) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count <= 0) {
        /* no driver at all (a machine without a GPU) is said as --version says it, not as the
         * runtime's "driver version is insufficient", which suggests a driver to upgrade */
        int driver = 0;
        if (cudaDriverGetVersion(&driver) == cudaSuccess && driver == 0)
            snprintf(why, cap, "no CUDA device visible (no CUDA driver)");
        else
            snprintf(why, cap, "no CUDA device visible (%s)", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return 0;
    }
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
        snprintf(why, cap, "%d CUDA device%s visible, the first %s", count, count == 1 ? "" : "s", prop.name);
    else
        snprintf(why, cap, "%d CUDA device%s visible", count, count == 1 ? "" : "s");
    return count;
}

int cuda_select_device(int *device) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        int driver = 0;
        if (cudaDriverGetVersion(&driver) == cudaSuccess && driver == 0)
            return ct_fail("device = cuda: no CUDA device found (no CUDA driver on this machine)");
        return ct_fail("device = cuda: no CUDA device found (cudaGetDeviceCount: %s)", cudaGetErrorString(e));
    }
    /* the rank's place on its node: torchrun's LOCAL_RANK / LOCAL_WORLD_SIZE, srun's
     * SLURM_LOCALID / SLURM_NTASKS_PER_NODE (set with --ntasks-per-node), or MPICH hydra's
     * MPI_LOCALRANKID / MPI_LOCALNRANKS (mpiexec) */
    int explicit_device = -1, local_rank = -1, local_size = 0;
    if (ct_env_nonneg_int("CT_CUDA_DEVICE", &explicit_device) != 0) explicit_device = -1;
    if (ct_env_nonneg_int("LOCAL_RANK", &local_rank) != 0 && ct_env_nonneg_int("SLURM_LOCALID", &local_rank) != 0 &&
        ct_env_nonneg_int("MPI_LOCALRANKID", &local_rank) != 0)
        local_rank = -1;
    if (ct_env_nonneg_int("LOCAL_WORLD_SIZE", &local_size) != 0 &&
        ct_env_nonneg_int("SLURM_NTASKS_PER_NODE", &local_size) != 0 &&
        ct_env_nonneg_int("MPI_LOCALNRANKS", &local_size) != 0)
        local_size = 0;
    char host[256] = "this host";
    gethostname(host, sizeof host - 1);
    return backend_pick_gpu(count, explicit_device, local_rank, local_size, ct_ranks_may_share_gpu(), host,
                            getenv("CUDA_VISIBLE_DEVICES"), device);
}

int backend_cuda_choose_gpu(BackendGpu *gpu) {
    if (cuda_select_device(&gpu->index) != 0) return -1;
    struct cudaDeviceProp prop;
    cudaError_t e = cudaSetDevice(gpu->index);
    if (e == cudaSuccess) e = cudaGetDeviceProperties(&prop, gpu->index);
    if (e != cudaSuccess) return ct_fail("device = cuda: CUDA device %d: %s", gpu->index, cudaGetErrorString(e));
    const unsigned char *u = (const unsigned char *)prop.uuid.bytes;
    snprintf(gpu->uuid, sizeof gpu->uuid,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2], u[3], u[4],
             u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
    snprintf(gpu->desc, sizeof gpu->desc, "CUDA device %d (%.120s, PCI %04x:%02x:%02x.0)", gpu->index, prop.name,
             prop.pciDomainID, prop.pciBusID, prop.pciDeviceID);
    return 0;
}

#endif /* CT_HAVE_CUDA */
