/* The few parts of librdkafka's public C API (rdkafka.h, stable ABI) that the audited producer's native
 * produce path uses, declared here so the build needs no librdkafka headers.
 *
 * The functions are not linked: _fastaudit_plugin.c looks them up at run time in the librdkafka that
 * confluent-kafka has already loaded (its wheel bundles its own copy), so they act on the same
 * rd_kafka_t as the Python client. */
#ifndef KAUDIT_RDKAFKA_ABI_H
#define KAUDIT_RDKAFKA_ABI_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct rd_kafka_s rd_kafka_t;
typedef struct rd_kafka_conf_s rd_kafka_conf_t;
typedef struct rd_kafka_error_s rd_kafka_error_t;
typedef int rd_kafka_resp_err_t; /* an enum in rdkafka.h: 0 is no error */

#define RD_KAFKA_PRODUCER 0
#define RD_KAFKA_MSG_F_COPY 0x2
#define RD_KAFKA_RESP_ERR__QUEUE_FULL (-184)
#define RD_KAFKA_TIMESTAMP_NOT_AVAILABLE 0
#define RD_KAFKA_TIMESTAMP_CREATE_TIME 1

typedef struct {
    rd_kafka_resp_err_t err;
    void *rkt;
    int32_t partition;
    void *payload;
    size_t len;
    void *key;
    size_t key_len;
    int64_t offset;
    void *_private; /* the producer's per-message opaque */
} rd_kafka_message_t;

enum {
    RD_KAFKA_VTYPE_END,
    RD_KAFKA_VTYPE_TOPIC,
    RD_KAFKA_VTYPE_RKT,
    RD_KAFKA_VTYPE_PARTITION,
    RD_KAFKA_VTYPE_VALUE,
    RD_KAFKA_VTYPE_KEY,
    RD_KAFKA_VTYPE_OPAQUE,
    RD_KAFKA_VTYPE_MSGFLAGS,
    RD_KAFKA_VTYPE_TIMESTAMP,
    RD_KAFKA_VTYPE_HEADER,
};

typedef struct {
    int vtype;
    union {
        const char *cstr;
        int i;
        int32_t i32;
        int64_t i64;
        struct {
            const void *ptr;
            size_t size;
        } mem;
        struct {
            const char *name;
            const void *val;
            ssize_t size;
        } header;
        void *ptr;
        char _pad[64];
    } u;
} rd_kafka_vu_t;

typedef rd_kafka_resp_err_t(on_new_f)(rd_kafka_t *rk, const rd_kafka_conf_t *conf, void *ic_opaque, char *errstr,
                                      size_t errstr_size);
typedef rd_kafka_resp_err_t(on_conf_dup_f)(rd_kafka_conf_t *new_conf, const rd_kafka_conf_t *old_conf,
                                           size_t filter_cnt, const char **filter, void *ic_opaque);
typedef rd_kafka_resp_err_t(on_acknowledgement_f)(rd_kafka_t *rk, rd_kafka_message_t *rkmessage, void *ic_opaque);
typedef rd_kafka_resp_err_t(on_destroy_f)(rd_kafka_t *rk, void *ic_opaque);

/* The functions, looked up by name (the names are librdkafka's, with the rd_kafka_ prefix). */
typedef struct {
    void *(*opaque)(const rd_kafka_t *rk);
    int (*type)(const rd_kafka_t *rk);
    rd_kafka_error_t *(*produceva)(rd_kafka_t *rk, const rd_kafka_vu_t *vus, size_t cnt);
    rd_kafka_resp_err_t (*error_code)(const rd_kafka_error_t *error);
    void (*error_destroy)(rd_kafka_error_t *error);
    int64_t (*message_timestamp)(const rd_kafka_message_t *message, int *timestamp_type);
    rd_kafka_resp_err_t (*conf_interceptor_add_on_new)(rd_kafka_conf_t *conf, const char *name, on_new_f *on_new,
                                                       void *ic_opaque);
    rd_kafka_resp_err_t (*conf_interceptor_add_on_conf_dup)(rd_kafka_conf_t *conf, const char *name,
                                                            on_conf_dup_f *on_conf_dup, void *ic_opaque);
    rd_kafka_resp_err_t (*interceptor_add_on_acknowledgement)(rd_kafka_t *rk, const char *name,
                                                              on_acknowledgement_f *on_ack, void *ic_opaque);
    rd_kafka_resp_err_t (*interceptor_add_on_destroy)(rd_kafka_t *rk, const char *name, on_destroy_f *on_destroy,
                                                      void *ic_opaque);
} rdkafka_api;

#define RDKAFKA_API_NAMES                                                                                           \
    {"rd_kafka_opaque",                                                                                             \
     "rd_kafka_type",                                                                                               \
     "rd_kafka_produceva",                                                                                          \
     "rd_kafka_error_code",                                                                                         \
     "rd_kafka_error_destroy",                                                                                      \
     "rd_kafka_message_timestamp",                                                                                  \
     "rd_kafka_conf_interceptor_add_on_new",                                                                        \
     "rd_kafka_conf_interceptor_add_on_conf_dup",                                                                   \
     "rd_kafka_interceptor_add_on_acknowledgement",                                                                 \
     "rd_kafka_interceptor_add_on_destroy"}

#endif
