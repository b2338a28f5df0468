/* The audit contract's window alignment and usable audit time (audit/contract/windows.py window_start_ms,
 * audit/contract/audit_time.py is_usable) in C, for the librdkafka plugin (native/plugin/).
 * tests/contract_cases.py holds it, through the plugin's exported functions, to the contract. */
#ifndef KAUDIT_AUDIT_WINDOW_H
#define KAUDIT_AUDIT_WINDOW_H

#include <stdint.h>

/* Start of the `window_ms`-long window holding `time_ms`: floor division, as Python's %, so a time before
 * the epoch is in a window that starts before it (C's % truncates toward zero). For any time at least one
 * window above INT64_MIN. */
static inline int64_t window_start_ms(int64_t time_ms, int64_t window_ms) {
    int64_t into = time_ms % window_ms;
    if (into < 0) into += window_ms;
    return time_ms - into;
}

/* After the epoch and not past `max_time_ms` (the contract's MAX_AUDIT_TIME_MS). */
static inline int is_usable_time(int64_t time_ms, int64_t max_time_ms) { return time_ms > 0 && time_ms <= max_time_ms; }

#endif
