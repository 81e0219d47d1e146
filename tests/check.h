/* A test-only assertion layer: each CHECK prints file:line and what failed, and the
 * test's exit status is the number of failed checks (0 = pass). */
#ifndef ATOLL_CHECK_H
#define ATOLL_CHECK_H

#include <math.h>
#include <stdio.h>

static int check_failures = 0;

#define CHECK(cond)                                                              \
  do {                                                                           \
    if (!(cond)) {                                                               \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);   \
      check_failures++;                                                          \
    }                                                                            \
  } while (0)

/* |a - b| <= tol * max(1, |b|) */
#define CHECK_NEAR(a, b, tol)                                                            \
  do {                                                                                   \
    double ca_ = (double)(a), cb_ = (double)(b), ct_ = (double)(tol);                    \
    double cs_ = fabs(cb_) > 1.0 ? fabs(cb_) : 1.0;                                      \
    if (!(fabs(ca_ - cb_) <= ct_ * cs_)) {                                               \
      fprintf(stderr, "%s:%d: CHECK_NEAR failed: %s = %.9g, %s = %.9g, tol %.3g\n",      \
              __FILE__, __LINE__, #a, ca_, #b, cb_, ct_);                                \
      check_failures++;                                                                  \
    }                                                                                    \
  } while (0)

#define CHECK_OK(call, errp)                                                             \
  do {                                                                                   \
    if ((call) != 0) {                                                                   \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, (errp)->msg); \
      check_failures++;                                                                  \
    }                                                                                    \
  } while (0)

#define CHECK_DONE()                                                             \
  do {                                                                           \
    if (check_failures) fprintf(stderr, "%d check(s) failed\n", check_failures); \
    return check_failures ? 1 : 0;                                               \
  } while (0)

#endif
