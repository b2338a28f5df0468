#ifndef KAUDIT_CLOCK_H
#define KAUDIT_CLOCK_H
#include <stdint.h>

int64_t now_ms(void);
int64_t coarse_now_ms(void); /* the clock's last tick (a few ms coarse), for a fraction of the cost */

#endif
