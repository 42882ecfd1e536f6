/* linked.c -- a program as a user writes one, linked against the build
** tree's shared library (-Lbuild -lkeel -Wl,-rpath,build): it must start,
** open an index, add, search and close. Run by test/test_build.sh.
**
**   linked PATH      exits 0 when every step worked
*/
#include <stdio.h>

#include "keel.h"

int
main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: linked PATH\n");
        return 2;
    }
    keel_index *idx;
    int rc = keel_open(argv[1], 4, NULL, &idx);
    if (rc) {
        fprintf(stderr, "linked: keel_open: %s\n", keel_errmsg());
        return 1;
    }
    float v[4];
    for (int i = 0; i < 100 && !rc; i++) {
        for (int j = 0; j < 4; j++)
            v[j] = (float)(i * 4 + j);
        rc = keel_add(idx, v, NULL);
    }
    if (!rc)
        rc = keel_flush(idx);
    keel_result res[3];
    size_t n = 0;
    const float q[4] = {40, 41, 42, 43}; /* the vector with id 10 */
    if (!rc)
        rc = keel_search(idx, q, 3, NULL, res, &n);
    if (rc) {
        fprintf(stderr, "linked: %s\n", keel_errmsg());
        keel_close(idx);
        return 1;
    }
    if (n != 3 || res[0].id != 10 || res[0].distance != 0.0f) {
        fprintf(stderr, "linked: nearest to vector 10 is %llu at %g (%zu "
                "results), not 10 at 0\n", n ? (unsigned long long)res[0].id
                : 0ull, n ? (double)res[0].distance : 0.0, n);
        keel_close(idx);
        return 1;
    }
    return keel_close(idx) ? 1 : 0;
}
