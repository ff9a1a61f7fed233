/* version.h — what this ctrain binary was built with (`ctrain --version`). */
#ifndef CT_VERSION_H
#define CT_VERSION_H

#include <stdio.h>

/* Print the version line and one line per optional part (compiled in or not, and versions). */
void version_print(FILE *out);

#endif
