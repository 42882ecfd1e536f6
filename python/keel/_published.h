/* _published.h -- the module functions on published indexes
** (_published.c: prune and versions), for _keel.c, which adds them to the
** module. */
#ifndef KEEL_PY_PUBLISHED_H
#define KEEL_PY_PUBLISHED_H

extern PyMethodDef keel_py_published_methods[];

#endif /* KEEL_PY_PUBLISHED_H */
