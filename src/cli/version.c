/* version.c — reports the build's parts and their library versions for `ctrain --version`,
 * queried from the libraries actually loaded (not only the headers built against). */
#include "commands.h"

#include <hdf5.h>
#include <string.h>

#include "blas_core.h"
#include "common.h"
#include "cpu_blas.h"

#ifdef CT_HAVE_MPI
#include <mpi.h>
#endif
#ifdef CT_HAVE_CUDA
#include <cuda_runtime_api.h>
/* CT_CUDA_ARCHS comes from the Makefile as a bare list (sm_90,sm_80,compute_90) to keep shell quoting simple. */
#define CT_STRINGIFY_LIST(...) #__VA_ARGS__
#define CT_STRINGIFY(x) CT_STRINGIFY_LIST(x)
#endif
#ifdef CT_HAVE_NCCL
#include <nccl.h>
#endif
#ifdef CT_HAVE_ZSTD
#include <zstd.h>
#endif
#ifdef CT_HAVE_BROTLI
#include <brotli/encode.h>
#endif
#ifdef CT_HAVE_CJSON
#include <cJSON.h>
#endif


void version_print(FILE *out) {
    fprintf(out, "ctrain %s\n", CT_VERSION);

    unsigned maj = 0, min = 0, rel = 0;
    H5get_libversion(&maj, &min, &rel);
    fprintf(out, "hdf5: %u.%u.%u\n", maj, min, rel);

    int par = openblas_get_parallel();
    fprintf(out, "blas: %s (%s)\n", openblas_get_config(),
            par == 2 ? "openmp" : par == 1 ? "pthreads" : "single-threaded");
    char core[256];
    fprintf(out, "blas core: %s\n", cpu_blas_core_describe(core, sizeof core));

#ifdef CT_HAVE_MPI
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(lib, &len);
    lib[strcspn(lib, "\n")] = '\0';
    /* MPICH prints "MPICH Version:\t4.0.2"; collapse to "mpich 4.0.2". */
    const char *ver = strchr(lib, ':');
    if (strncmp(lib, "MPICH", 5) == 0 && ver) {
        ver++;
        while (*ver == ' ' || *ver == '\t') ver++;
        fprintf(out, "mpi: mpich %s\n", ver);
    } else {
        fprintf(out, "mpi: %s\n", lib);
    }
#else
    fprintf(out, "mpi: no (build with MPICH for multi-rank CPU jobs)\n");
#endif

#ifdef CT_HAVE_PMI2
    fprintf(out, "pmi2: yes\n");
#else
    fprintf(out, "pmi2: no (install libpmi2-0-dev or set PMI2_HOME)\n");
#endif

#ifdef CT_HAVE_SENTENCEPIECE
    fprintf(out, "sentencepiece: yes\n");
#else
    fprintf(out, "sentencepiece: no (install libsentencepiece-dev and g++, or set SENTENCEPIECE_HOME)\n");
#endif

#ifdef CT_HAVE_ZSTD
    fprintf(out, "zstd: %s\n", ZSTD_versionString());
#else
    fprintf(out, "zstd: no (install libzstd-dev or set ZSTD_HOME: golf_format = int6-zstd needs it)\n");
#endif

#ifdef CT_HAVE_BROTLI
    {
        const uint32_t v = BrotliEncoderVersion(); /* 0xMMMmmmppp */
        fprintf(out, "brotli: %u.%u.%u\n", v >> 24, (v >> 12) & 0xfff, v & 0xfff);
    }
#else
    fprintf(out, "brotli: no (install libbrotli-dev or set BROTLI_HOME: golf_format = gptq-brotli needs it)\n");
#endif

#ifdef CT_HAVE_CJSON
    fprintf(out, "cjson: %s\n", cJSON_Version());
#else
    fprintf(out, "cjson: no (install libcjson-dev or set CJSON_HOME: data tokenize's JSONL input needs it)\n");
#endif

#ifdef CT_HAVE_CUDA
    int runtime = 0, driver = 0, devices = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);
    if (driver == 0 || cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
    fprintf(out, "cuda: yes (%d.%d, archs %s); gpus visible: %d%s\n", runtime / 1000, (runtime % 1000) / 10,
            CT_STRINGIFY(CT_CUDA_ARCHS), devices, driver == 0 ? " (no CUDA driver)" : "");
#else
    fprintf(out, "cuda: no (nvcc not found at build time; set CUDA_HOME)\n");
#endif

#ifdef CT_HAVE_NCCL
    int nccl = 0;
    ncclGetVersion(&nccl);
    fprintf(out, "nccl: %d.%d.%d\n", nccl / 10000, (nccl % 10000) / 100, nccl % 100);
#else
    fprintf(out, "nccl: no\n");
#endif
}
