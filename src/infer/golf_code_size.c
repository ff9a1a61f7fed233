/* golf_code_size.c — ctrain's code size as parameter-golf counts a submission's code (docs/model.md,
 * "The code's size"), measured by the build: scripts/code-size.sh writes build/code_size.h, which
 * the Makefile gives to this file alone with -include, so a change to any source recompiles this
 * one small file and nothing else (tests/meta/test_removed_checks.sh counts what is rebuilt).
 * Unknown (-1) when the build had no brotli command. */
#include "golf_artifact.h"

#ifndef CT_CODE_BYTES
#define CT_CODE_BYTES -1LL
#define CT_CODE_RAW_BYTES -1LL
#endif

const int64_t golf_code_bytes = CT_CODE_BYTES;
const int64_t golf_code_raw_bytes = CT_CODE_RAW_BYTES;
