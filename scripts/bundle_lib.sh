# bundle_lib.sh — sourced by scripts/bundle.sh (`make bundle`) and scripts/gpu-pack.sh
# (`make gpu-pack`): copying programs with the non-system shared libraries they load into a
# folder that runs from wherever it is unpacked. One place decides what counts as the system's.
#
# What the node provides: the C library family, the compiler runtime every Linux has, and CUDA
# (its driver decides which runtime, cuBLAS and NCCL fit). Everything else `ldd` resolves is
# copied.
bundle_system_libs='^(linux-vdso|ld-linux|libc|libm|libpthread|libdl|librt|libresolv|libutil|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libnccl|libnvrtc|libcudnn)\.'

# bundle_copy_libs LIBDIR EXE...: copies every non-system library the programs load (as `ldd`
# resolves them here, their own dependencies included) into LIBDIR, each with the search path
# $ORIGIN so it finds the others beside it. Prints how many libraries LIBDIR then holds. Fails
# naming a library `ldd` cannot find.
bundle_copy_libs() {
    local libdir=$1 exe lib arrow path _
    shift
    mkdir -p "$libdir"
    for exe in "$@"; do
        while read -r lib arrow path _; do
            [ "$arrow" = "=>" ] || continue
            if [[ "$lib" =~ $bundle_system_libs ]]; then continue; fi
            if [ "$path" = not ] || [ ! -f "$path" ]; then
                echo "bundle: $exe needs $lib, which ldd does not find here" >&2
                return 1
            fi
            [ -e "$libdir/$lib" ] && continue
            cp -L "$path" "$libdir/$lib"
            chmod u+w "$libdir/$lib"
            patchelf --force-rpath --set-rpath '$ORIGIN' "$libdir/$lib"
        done < <(ldd "$exe")
    done
    ls "$libdir" | wc -l
}

# bundle_add_program SRC DEST LIBPATH [runpath]: copies program SRC to DEST and puts LIBPATH (e.g.
# '$ORIGIN/../lib') before its own search path. By default as DT_RPATH, which comes before
# LD_LIBRARY_PATH and also serves the libraries' needs; with "runpath" as DT_RUNPATH, which
# LD_LIBRARY_PATH overrides (so a newer libnccl.so.2 put first there wins over the CUDA
# toolkit's copy on the build's search path).
bundle_add_program() {
    local src=$1 dest=$2 libpath=$3 kind=${4:-rpath} old
    mkdir -p "$(dirname "$dest")"
    cp "$src" "$dest"
    chmod u+w "$dest"
    old=$(patchelf --print-rpath "$src")
    if [ "$kind" = runpath ]; then
        patchelf --remove-rpath "$dest"
        patchelf --set-rpath "$libpath${old:+:$old}" "$dest"
    else
        patchelf --force-rpath --set-rpath "$libpath${old:+:$old}" "$dest"
    fi
}
