/* The plugin's clock, on its own: every part that stamps or waits reads it, and it reads nothing of theirs. */
#include <time.h>

#include "clock.h"

int64_t coarse_now_ms(void) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME_COARSE, &now);
    return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

int64_t now_ms(void) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}
