# ctrain build.
#   make            build build/ctrain (CPU backend always; CUDA backend when nvcc is found)
#   make test       run every test (unit, CLI, data, parity); ends with "N passed, N failed, N skipped"
#   make test-gpu   run the tests that need an NVIDIA GPU
#   make demo       the main job on the embedded default (same as scripts/demo.sh)
#   make bench      CPU benchmarks
#   make asan       the unit and CLI tests on an AddressSanitizer + UBSan build (build-asan/, no CUDA)
#   make gpu-pack   the GPU check's package for a GPU machine (build/ctrain-gpu-pack.tar.gz)
# Dependency locations can be overridden for clusters that use modules instead of apt:
#   HDF5_HOME, OPENBLAS_HOME, MPI_HOME, PMI2_HOME, SENTENCEPIECE_HOME, ZSTD_HOME, BROTLI_HOME, CJSON_HOME, CUDA_HOME, NCCL_HOME
# Missing dependencies: run scripts/install-deps.sh (it installs them on Debian, or says what to set).

BUILD ?= build
CC ?= cc
OPT ?= -O3 -march=x86-64-v2 -g
CFLAGS ?= $(OPT)
# -ffp-contract=off: no fused multiply-adds the source did not ask for (fmaf), so the bits do
# not depend on -march or the compiler (GCC's ISO mode implies it, clang's default does not).
# -fno-trapping-math changes no value (nothing here reads floating-point exception flags); it
# lets GCC turn `c ? a*b : 0` into a vector blend.
# ---- layers (docs/architecture.md) ----
# Each source folder and the folders below it that it may include. A file is compiled with -I for
# its own folder and those only, so an include that runs up a layer (or sideways where the table
# does not allow it) fails to compile; tests/check_layers.py checks the same table for loops and
# for calls between files. Order: base -> kernels -> config/model/data -> dist, backend,
# checkpoint -> infer -> train -> cli.
LAYER_base           :=
LAYER_kernels        :=
LAYER_kernels/cpu    := base kernels
LAYER_kernels/cuda   := base kernels
LAYER_src/config     := base
LAYER_src/model      := base src/config
LAYER_src/data       := base
LAYER_src/dist       := base
LAYER_src/backend    := base kernels kernels/cpu kernels/cuda src/config src/model
LAYER_checkpoint     := base src/config src/model src/data
LAYER_src/infer      := base kernels kernels/cpu src/config src/model src/data src/dist src/backend
LAYER_src/train      := base src/config src/model src/data src/dist src/backend src/infer checkpoint
LAYER_src/cli        := base kernels kernels/cpu src/config src/model src/data src/dist src/backend \
                        src/infer checkpoint src/train
SRC_DIRS := base kernels kernels/cpu kernels/cuda src/config src/model src/data src/dist src/backend \
            src/infer checkpoint src/train src/cli
layer_inc = $(addprefix -I,$(1) $(LAYER_$(1)))
# Tests and benchmarks reach every layer.
ALL_INC := $(addprefix -I,$(SRC_DIRS))
override CFLAGS += -std=c11 -D_GNU_SOURCE -ffp-contract=off -fno-trapping-math -Wall -Wextra -fopenmp -MMD -MP
LDFLAGS ?=
LDLIBS := -fopenmp -lpthread -lm -lz

# ---- HDF5 (required, serial) ----
ifdef HDF5_HOME
HDF5_CFLAGS := -I$(HDF5_HOME)/include
HDF5_LIBS := -L$(HDF5_HOME)/lib -Wl,-rpath,$(HDF5_HOME)/lib -lhdf5
else
HDF5_CFLAGS := $(shell pkg-config --cflags hdf5-serial 2>/dev/null || pkg-config --cflags hdf5 2>/dev/null)
HDF5_LIBS := $(shell pkg-config --libs hdf5-serial 2>/dev/null || pkg-config --libs hdf5 2>/dev/null)
endif
ifeq ($(strip $(HDF5_LIBS)),)
DEPS_MISSING += HDF5 (set HDF5_HOME=/path/to/hdf5 with include/ and lib/);
endif

# ---- OpenBLAS (required); the OpenMP build shares our thread pool instead of fighting it ----
ifdef OPENBLAS_HOME
BLAS_CFLAGS := -I$(OPENBLAS_HOME)/include
BLAS_LIBS := -L$(OPENBLAS_HOME)/lib -Wl,-rpath,$(OPENBLAS_HOME)/lib -lopenblas
else ifneq ($(wildcard /usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so),)
BLAS_CFLAGS := -I/usr/include/x86_64-linux-gnu/openblas-openmp
BLAS_LIBS := -L/usr/lib/x86_64-linux-gnu/openblas-openmp -Wl,-rpath,/usr/lib/x86_64-linux-gnu/openblas-openmp -lopenblas
else
BLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null)
BLAS_LIBS := $(shell pkg-config --libs openblas 2>/dev/null)
endif
ifeq ($(strip $(BLAS_LIBS)),)
DEPS_MISSING += OpenBLAS (set OPENBLAS_HOME=/path/to/openblas);
endif

# ---- MPI (MPICH; optional: CPU multi-rank jobs) ----
ifdef MPI_HOME
MPI_CFLAGS := -I$(MPI_HOME)/include -DCT_HAVE_MPI=1
MPI_LIBS := -L$(MPI_HOME)/lib -Wl,-rpath,$(MPI_HOME)/lib -lmpi
else
MPI_LIBS := $(shell pkg-config --libs mpich 2>/dev/null)
MPI_CFLAGS := $(if $(MPI_LIBS),$(shell pkg-config --cflags mpich 2>/dev/null) -DCT_HAVE_MPI=1,)
endif

# ---- PMI2 (Slurm's client library; optional: rank discovery under srun --mpi=pmi2) ----
ifdef PMI2_HOME
PMI2_CFLAGS := -I$(PMI2_HOME)/include -I$(PMI2_HOME)/include/slurm -DCT_HAVE_PMI2=1
PMI2_LIBS := -L$(PMI2_HOME)/lib -Wl,-rpath,$(PMI2_HOME)/lib -lpmi2
else ifneq ($(wildcard /usr/include/slurm/pmi2.h),)
PMI2_CFLAGS := -I/usr/include/slurm -DCT_HAVE_PMI2=1
PMI2_LIBS := -lpmi2
endif

# ---- zstd (optional: the 1.1248 record's int6 + zstd golf artifact, golf_format = int6-zstd) ----
# Without it everything else builds and works; int6-zstd then says what to install.
ifdef ZSTD_HOME
ZSTD_CFLAGS := -I$(ZSTD_HOME)/include -DCT_HAVE_ZSTD=1
ZSTD_LIBS := -L$(ZSTD_HOME)/lib -Wl,-rpath,$(ZSTD_HOME)/lib -lzstd
else
ZSTD_LIBS := $(shell pkg-config --libs libzstd 2>/dev/null)
ZSTD_CFLAGS := $(if $(ZSTD_LIBS),$(shell pkg-config --cflags libzstd 2>/dev/null) -DCT_HAVE_ZSTD=1,)
endif

# ---- brotli (optional: the 1.0611 record's GPTQ golf artifact, golf_format = gptq-brotli) ----
# Without it everything else builds and works; gptq-brotli then says what to install.
ifdef BROTLI_HOME
BROTLI_CFLAGS := -I$(BROTLI_HOME)/include -DCT_HAVE_BROTLI=1
BROTLI_LIBS := -L$(BROTLI_HOME)/lib -Wl,-rpath,$(BROTLI_HOME)/lib -lbrotlienc -lbrotlidec
else
BROTLI_LIBS := $(shell pkg-config --libs libbrotlienc libbrotlidec 2>/dev/null)
BROTLI_CFLAGS := $(if $(BROTLI_LIBS),$(shell pkg-config --cflags libbrotlienc libbrotlidec 2>/dev/null) -DCT_HAVE_BROTLI=1,)
endif

# ---- cJSON (optional: JSONL input of `ctrain data tokenize`) ----
# Without it everything else builds and works; a JSONL input then says what to install.
ifdef CJSON_HOME
CJSON_CFLAGS := -I$(CJSON_HOME)/include -I$(CJSON_HOME)/include/cjson -DCT_HAVE_CJSON=1
CJSON_LIBS := -L$(CJSON_HOME)/lib -Wl,-rpath,$(CJSON_HOME)/lib -lcjson
else
CJSON_LIBS := $(shell pkg-config --libs libcjson 2>/dev/null)
CJSON_CFLAGS := $(if $(CJSON_LIBS),$(shell pkg-config --cflags libcjson 2>/dev/null) -DCT_HAVE_CJSON=1,)
endif

# ---- SentencePiece (optional: `ctrain data import-bin --tokenizer MODEL.model`, `ctrain data luts`) ----
# Its interface is C++, so src/data/spm_shim.cc, the one C++ file, is compiled with $(CXX) when
# the library and a C++ compiler are found; without them those commands say what to install.
CXX ?= g++
ifdef SENTENCEPIECE_HOME
SPM_CFLAGS := -I$(SENTENCEPIECE_HOME)/include -DCT_HAVE_SENTENCEPIECE=1
SPM_LIBS := -L$(SENTENCEPIECE_HOME)/lib -Wl,-rpath,$(SENTENCEPIECE_HOME)/lib -lsentencepiece -lstdc++
else ifneq ($(shell command -v $(CXX) 2>/dev/null),)
SPM_LIBS := $(filter-out -lsentencepiece_train,$(shell pkg-config --libs sentencepiece 2>/dev/null))
SPM_CFLAGS := $(if $(SPM_LIBS),$(shell pkg-config --cflags sentencepiece 2>/dev/null) -DCT_HAVE_SENTENCEPIECE=1,)
SPM_LIBS := $(if $(SPM_LIBS),$(SPM_LIBS) -lstdc++,)
endif
CXXFLAGS ?= $(OPT)
override CXXFLAGS += -std=c++17 -Wall -Wextra -MMD -MP $(SPM_CFLAGS)

# ---- CUDA + cuBLAS + NCCL (optional: device=cuda) ----
CUDA_HOME ?= /usr/local/cuda
NCCL_HOME ?= $(CUDA_HOME)
NVCC := $(firstword $(wildcard $(CUDA_HOME)/bin/nvcc))
# SASS for the H100 (sm_90) and A100 (sm_80), and sm_90's PTX beside them, which newer GPUs
# (sm_100, sm_120) compile when ctrain starts instead of failing with "no kernel image"
CUDA_ARCHS ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_80,code=sm_80 \
              -gencode arch=compute_90,code=compute_90
ifneq ($(NVCC),)
CUDA_CFLAGS := -I$(CUDA_HOME)/include -I$(NCCL_HOME)/include -DCT_HAVE_CUDA=1 -DCT_CUDA_ARCHS=sm_90,sm_80,compute_90
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -L$(NCCL_HOME)/lib64 -L$(NCCL_HOME)/lib \
             -Wl,-rpath,$(NCCL_HOME)/lib64 -lcublasLt -lcublas -lcudart -lstdc++
ifneq ($(wildcard $(NCCL_HOME)/include/nccl.h),)
CUDA_CFLAGS += -DCT_HAVE_NCCL=1
CUDA_LIBS += -lnccl
endif
NVCCFLAGS ?= -O3 -std=c++17 $(CUDA_ARCHS) -Xptxas -v -Xcompiler -Wall,-Wextra
# nvcc splits -D values at commas (CT_CUDA_ARCHS=sm_90,... would also define sm_80, which
# breaks <nv/target>), so .cu files get the CUDA flags without it (they use __CUDA_ARCH_LIST__).
NVCC_DEFS = $(filter-out -DCT_CUDA_ARCHS=%,$(CUDA_CFLAGS)) -MMD -MP
endif

override CFLAGS += $(HDF5_CFLAGS) $(BLAS_CFLAGS) $(MPI_CFLAGS) $(PMI2_CFLAGS) $(SPM_CFLAGS) $(ZSTD_CFLAGS) $(BROTLI_CFLAGS) $(CJSON_CFLAGS) $(CUDA_CFLAGS)
LDLIBS := $(HDF5_LIBS) $(BLAS_LIBS) $(MPI_LIBS) $(PMI2_LIBS) $(SPM_LIBS) $(ZSTD_LIBS) $(BROTLI_LIBS) $(CJSON_LIBS) $(CUDA_LIBS) $(LDLIBS)

# ---- sources ----
LIB_SRCS := $(filter-out src/cli/main.c,$(foreach d,$(SRC_DIRS),$(wildcard $(d)/*.c)))
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/obj/%.o)
CU_SRCS := $(if $(NVCC),$(wildcard kernels/cuda/*.cu),)
CU_OBJS := $(CU_SRCS:%.cu=$(BUILD)/obj/%.o)
CXX_SRCS := $(if $(SPM_CFLAGS),$(foreach d,$(SRC_DIRS),$(wildcard $(d)/*.cc)),)
CXX_OBJS := $(CXX_SRCS:%.cc=$(BUILD)/obj/%.o)
TEST_SRCS := $(wildcard tests/unit/test_*.c)
TEST_BINS := $(TEST_SRCS:tests/unit/%.c=$(BUILD)/tests/%)
BENCH_SRCS := $(wildcard tests/bench/bench_*.c)
BENCH_BINS := $(BENCH_SRCS:tests/bench/%.c=$(BUILD)/bench/%)

.PHONY: all test test-gpu demo bench clean check-deps asan bundle gpu-pack
all: check-deps $(BUILD)/ctrain $(TEST_BINS) $(BENCH_BINS) $(BUILD)/layers.txt

# Missing required libraries stop the build with one clear message instead of compiler noise.
check-deps:
ifneq ($(strip $(DEPS_MISSING)),)
	@echo "ctrain: missing: $(DEPS_MISSING) run scripts/install-deps.sh" >&2; exit 1
endif

# ctrain's code size as parameter-golf counts code (docs/model.md, "The code's size"), compiled into
# golf_code_size.c alone: remade whenever a source it counts changes
CODE_FILES := Makefile $(sort $(foreach d,$(SRC_DIRS),$(wildcard $(d)/*.c $(d)/*.h $(d)/*.cc $(d)/*.cu $(d)/*.cuh)))
$(BUILD)/code_size.h: $(CODE_FILES) scripts/code-size.sh
	@mkdir -p $(dir $@)
	@bash scripts/code-size.sh --header $@
$(BUILD)/obj/src/infer/golf_code_size.o: $(BUILD)/code_size.h
$(BUILD)/obj/src/infer/golf_code_size.o: override CFLAGS += -include $(BUILD)/code_size.h

$(BUILD)/obj/%.o: %.c | check-deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(call layer_inc,$(patsubst %/,%,$(dir $<))) -c $< -o $@

$(BUILD)/obj/%.o: %.cu | check-deps
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $(call layer_inc,$(patsubst %/,%,$(dir $<))) $(NVCC_DEFS) -c $< -o $@
-include $(CU_OBJS:.o=.d)

$(BUILD)/obj/%.o: %.cc | check-deps
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $(call layer_inc,$(patsubst %/,%,$(dir $<))) -c $< -o $@
-include $(CXX_OBJS:.o=.d)

$(BUILD)/libctrain.a: $(LIB_OBJS) $(CU_OBJS) $(CXX_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# The layer table and the library's objects, for tests/check_layers.py (tests/cli/test_layers.sh).
$(BUILD)/layers.txt: Makefile $(BUILD)/libctrain.a
	@mkdir -p $(dir $@)
	@( $(foreach d,$(SRC_DIRS),echo 'layer $(d): $(LAYER_$(d))';) \
	   $(foreach o,$(LIB_OBJS) $(CU_OBJS) $(CXX_OBJS) $(BUILD)/obj/src/cli/main.o,echo 'object $(o)';) ) >$@

$(BUILD)/ctrain: $(BUILD)/obj/src/cli/main.o $(BUILD)/libctrain.a
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/libctrain.a tests/harness.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(ALL_INC) -Itests -DTEST_PROGRAM='"$*"' $< $(BUILD)/libctrain.a $(LDFLAGS) $(LDLIBS) -o $@

$(BUILD)/bench/%: tests/bench/%.c $(BUILD)/libctrain.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(ALL_INC) -Itests $< $(BUILD)/libctrain.a $(LDFLAGS) $(LDLIBS) -o $@
# their headers (the GPU op table's tests/unit/gpu_ops_*.h, ...), from -MMD's files beside them
-include $(TEST_BINS:=.d) $(BENCH_BINS:=.d)

# `make test` is the one command that runs every test on a fresh machine: it installs what the
# tests need (quick when present), builds, then runs. Sub-makes re-read the library flags.
test:
	@bash scripts/install-deps.sh --test
	@$(MAKE) --no-print-directory -j2 all
	@bash tests/run.sh $(BUILD)

test-gpu:
	@bash scripts/install-deps.sh --test
	@$(MAKE) --no-print-directory -j2 all
	@CT_REQUIRE_GPU=1 bash tests/run.sh $(BUILD) gpu

demo:
	@bash scripts/demo.sh

# Memory errors and undefined behaviour stop the test that hits them (halt/abort on the first
# report). Leak reports are off: the libraries (OpenMP, HDF5) keep process-lifetime allocations.
ASAN_OPT := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
asan:
	@bash scripts/install-deps.sh --test
	@$(MAKE) --no-print-directory -j2 BUILD=build-asan OPT="$(ASAN_OPT)" LDFLAGS="-fsanitize=address,undefined" NVCC= all
	@ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 CT_TEST_TIME_SCALE=4 \
	    bash tests/run.sh build-asan unit-cli

bench:
	@bash scripts/install-deps.sh --test
	@$(MAKE) --no-print-directory -j2 all
	@bash tests/bench/run.sh $(BUILD)

# A relocatable tarball of ctrain with its non-system libraries (scripts/bundle.sh says what is in
# it and what the node must provide): $(BUILD)/ctrain-bundle.tar.gz.
bundle:
	@bash scripts/install-deps.sh
	@$(MAKE) --no-print-directory -j2 $(BUILD)/ctrain
	@bash scripts/bundle.sh $(BUILD) $(BUILD)/ctrain-bundle.tar.gz

# The GPU check's package (scripts/gpu-pack.sh: ctrain, the GPU test programs and benchmarks, the
# scripts, MPICH's launcher and the non-system libraries, for a GPU machine that has none of
# them; scripts/gpu-check.sh runs it there, docs/testing.md "The GPU check"): build/ctrain-gpu-pack.tar.gz.
# GPU_PACK_NCCL: a folder with libnccl.so.2.*.xz (NCCL >= 2.30 for two ranks on one GPU,
# scripts/build-nccl.sh), packed when present.
GPU_PACK_NCCL ?= $(firstword $(patsubst %/,%,$(dir $(wildcard $(BUILD)/nccl-sm90/libnccl.so.2.*.xz ../shared/nccl-*-sm90/libnccl.so.2.*.xz))))
gpu-pack:
	@bash scripts/install-deps.sh
	@$(MAKE) --no-print-directory -j2 all $(if $(NVCC),$(BUILD)/bench/bench_gpu_attention_fwd1,)
	@bash scripts/gpu-pack.sh $(BUILD) $(BUILD)/ctrain-gpu-pack.tar.gz $(GPU_PACK_NCCL)

# bench_gpu_attention with the one-tile attention forward (-DCT_ATT_FWD_MT=1, sm_90), timed beside
# the default two-tile one by the GPU check's attention stage: only cuda_attention_fwd.cu is
# compiled again; its object comes before the library, so the library's copy is not linked.
$(BUILD)/obj/fwd1/cuda_attention_fwd.o: kernels/cuda/cuda_attention_fwd.cu | check-deps
	@mkdir -p $(dir $@)
	$(NVCC) $(filter-out -gencode arch=%,$(NVCCFLAGS)) -gencode arch=compute_90,code=sm_90 -DCT_ATT_FWD_MT=1 \
	    $(call layer_inc,kernels/cuda) $(NVCC_DEFS) -c $< -o $@
$(BUILD)/bench/bench_gpu_attention_fwd1: tests/bench/bench_gpu_attention.c $(BUILD)/obj/fwd1/cuda_attention_fwd.o $(BUILD)/libctrain.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(ALL_INC) -Itests $< $(BUILD)/obj/fwd1/cuda_attention_fwd.o $(BUILD)/libctrain.a $(LDFLAGS) $(LDLIBS) -o $@
-include $(BUILD)/obj/fwd1/cuda_attention_fwd.d

clean:
	rm -rf $(BUILD)

-include $(LIB_OBJS:.o=.d) $(BUILD)/obj/src/cli/main.d

# For engineers compiling one file by hand: prints the flags the build uses.
.PHONY: flags
flags:
	@echo "CFLAGS=$(CFLAGS)"
	@echo "INCLUDES=$(ALL_INC)"
	@echo "LDLIBS=$(LDLIBS)"
# The include flags one source folder is compiled with: make -s layer-flags DIR=src/model
.PHONY: layer-flags
layer-flags:
	@echo "$(call layer_inc,$(DIR))"

# Regenerate the generated parts of docs/ from the code (tests/cli/test_docs.sh checks they match).
.PHONY: docs
docs: $(BUILD)/ctrain
	@bash scripts/gen-docs.sh $(BUILD)/ctrain
