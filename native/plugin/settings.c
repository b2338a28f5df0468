/* The plugin's entry point and its settings: the kaudit.* keys, which librdkafka hands to the plugin's
 * on_conf_set interceptor because they are none of its own. Each configuration object holds its own
 * Settings (a copy made on rd_kafka_conf_dup), freed with it, and with it the instance of its client. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kaudit_plugin.h"

/* A cluster name (audit/contract/names.py CLUSTER_NAME_PATTERN) or, with `topic`, a Kafka topic name. */
static int is_name(const char *value, size_t longest, int topic) {
    size_t length = strlen(value);
    if (length == 0 || length > longest || strcmp(value, ".") == 0 || strcmp(value, "..") == 0) return 0;
    if (!topic && (value[0] == '_' || value[0] == '-')) return 0;
    for (const char *c = value; *c; c++) {
        int plain = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '_' ||
                    *c == '-' || (topic && *c == '.');
        if (!plain) return 0;
    }
    return 1;
}

static int is_text(const char *value, size_t longest) {
    if (strlen(value) > longest) return 0;
    for (const unsigned char *c = (const unsigned char *)value; *c; c++)
        if (*c < 0x20 || *c == 0x7f) return 0;
    return 1;
}

/* A whole number in [lowest, highest]; 0 if `value` is not one. */
static int parse_number(const char *value, int64_t lowest, int64_t highest, int64_t *into) {
    char *end = NULL;
    errno = 0;
    long long number = strtoll(value, &end, 10);
    if (errno || end == value || *end != '\0' || number < lowest || number > highest) return 0;
    *into = number;
    return 1;
}

static rd_kafka_conf_res_t invalid(char *errstr, size_t errstr_size, const char *name, const char *value,
                                   const char *expected) {
    snprintf(errstr, errstr_size, "%s: \"%.80s\" is not %s", name, value, expected);
    return RD_KAFKA_CONF_INVALID;
}

/* A POSIX extended regex that compiles, or "" for none. */
static int is_regex(const char *value, size_t longest) {
    if (!*value) return 1;
    regex_t compiled;
    if (!is_text(value, longest) || regcomp(&compiled, value, REG_EXTENDED | REG_NOSUB) != 0) return 0;
    regfree(&compiled);
    return 1;
}

static rd_kafka_conf_res_t on_conf_set(rd_kafka_conf_t *conf, const char *name, const char *value, char *errstr,
                                       size_t errstr_size, void *ic_opaque) {
    Settings *settings = ic_opaque;
    int64_t number;
    if (strncmp(name, "kaudit.", 7) != 0) return RD_KAFKA_CONF_UNKNOWN;
    const char *key = name + 7;
    if (strcmp(key, "cluster") == 0) {
        if (!is_name(value, 64, 0)) return invalid(errstr, errstr_size, name, value, "a cluster name ([A-Za-z0-9_-], at most 64)");
        snprintf(settings->cluster, sizeof settings->cluster, "%s", value);
    } else if (strcmp(key, "audit.topic") == 0) {
        if (!is_name(value, 249, 1))
            return invalid(errstr, errstr_size, name, value, "a topic name");
        snprintf(settings->audit_topic, sizeof settings->audit_topic, "%s", value);
    } else if (strcmp(key, "service") == 0 || strcmp(key, "host") == 0 || strcmp(key, "instance.id") == 0) {
        char *field = key[0] == 's' ? settings->service : key[0] == 'h' ? settings->host : settings->instance_id;
        size_t size = key[0] == 's' ? sizeof settings->service : key[0] == 'h' ? sizeof settings->host : sizeof settings->instance_id;
        if (!is_text(value, size - 1) || (key[0] != 'h' && !*value))
            return invalid(errstr, errstr_size, name, value, "a text without control characters, short enough");
        snprintf(field, size, "%s", value);
    } else if (strcmp(key, "window.minutes") == 0) {
        if (!parse_number(value, 1, KAUDIT_MINUTES_PER_DAY, &number) || KAUDIT_MINUTES_PER_DAY % number != 0)
            return invalid(errstr, errstr_size, name, value, "a number of minutes that divides a day");
        settings->window_ms = number * KAUDIT_MS_PER_MINUTE;
    } else if (strcmp(key, "flush.interval.ms") == 0) {
        if (!parse_number(value, 10, 3600000, &number)) return invalid(errstr, errstr_size, name, value, "10 to 3600000");
        settings->flush_interval_ms = number;
    } else if (strcmp(key, "digest.exclude") == 0) {
        if (!is_regex(value, sizeof settings->digest_exclude - 1))
            return invalid(errstr, errstr_size, name, value, "a POSIX extended regex of topics, short enough");
        snprintf(settings->digest_exclude, sizeof settings->digest_exclude, "%s", value);
    } else if (strcmp(key, "tally.max.entries") == 0) {
        if (!parse_number(value, 1, KAUDIT_MAX_MAX_ENTRIES, &number)) return invalid(errstr, errstr_size, name, value, "1 to 1000000");
        settings->max_entries = number;
    } else if (strcmp(key, "close.timeout.ms") == 0) {
        if (!parse_number(value, 0, 3600000, &number)) return invalid(errstr, errstr_size, name, value, "0 to 3600000");
        settings->close_timeout_ms = number;
    } else {
        snprintf(errstr, errstr_size,
                 "%s: no such setting of the kaudit plugin (cluster, audit.topic, service, host, instance.id, "
                 "window.minutes, flush.interval.ms, close.timeout.ms, tally.max.entries, digest.exclude)", name);
        return RD_KAFKA_CONF_INVALID;
    }
    return RD_KAFKA_CONF_OK;
}

static Settings *settings_new(const Settings *from) {
    Settings *settings = calloc(1, sizeof *settings);
    if (settings == NULL) return NULL;
    if (from != NULL) {
        *settings = *from;
        settings->instance = NULL;
        return settings;
    }
    snprintf(settings->audit_topic, sizeof settings->audit_topic, "%s", KAUDIT_DEFAULT_AUDIT_TOPIC);
    snprintf(settings->service, sizeof settings->service, "app");
    if (gethostname(settings->host, sizeof settings->host - 1) != 0) settings->host[0] = '\0';
    settings->window_ms = KAUDIT_DEFAULT_WINDOW_MINUTES * KAUDIT_MS_PER_MINUTE;
    settings->flush_interval_ms = KAUDIT_DEFAULT_FLUSH_INTERVAL_MS;
    settings->close_timeout_ms = 30000;
    settings->max_entries = KAUDIT_DEFAULT_MAX_ENTRIES;
    return settings;
}

static rd_kafka_resp_err_t on_conf_dup(rd_kafka_conf_t *new_conf, const rd_kafka_conf_t *old_conf, size_t filter_cnt,
                                       const char **filter, void *ic_opaque) {
    Settings *copy = settings_new(ic_opaque);
    if (copy == NULL) return RD_KAFKA_RESP_ERR__FAIL;
    rd_kafka_resp_err_t err = add_conf_interceptors(new_conf, copy);
    if (err) free(copy);
    return err;
}

static rd_kafka_resp_err_t on_conf_destroy(void *ic_opaque) {
    Settings *settings = ic_opaque;
    if (settings->instance != NULL) instance_free(settings->instance);
    free(settings);
    return 0;
}

static rd_kafka_resp_err_t on_new(rd_kafka_t *rk, const rd_kafka_conf_t *conf, void *ic_opaque, char *errstr,
                                  size_t errstr_size) {
    return instance_start(rk, conf, ic_opaque, errstr, errstr_size);
}

rd_kafka_resp_err_t add_conf_interceptors(rd_kafka_conf_t *conf, Settings *settings) {
    rd_kafka_resp_err_t err = rdk.conf_interceptor_add_on_conf_set(conf, PLUGIN_NAME, on_conf_set, settings);
    if (!err) err = rdk.conf_interceptor_add_on_conf_dup(conf, PLUGIN_NAME, on_conf_dup, settings);
    if (!err) err = rdk.conf_interceptor_add_on_conf_destroy(conf, PLUGIN_NAME, on_conf_destroy, settings);
    if (!err) err = rdk.conf_interceptor_add_on_new(conf, PLUGIN_NAME, on_new, settings);
    return err;
}

/* The plugin's entry point: librdkafka calls it when `plugin.library.paths` names this file. */
EXPORTED rd_kafka_resp_err_t conf_init(rd_kafka_conf_t *conf, void **plug_opaquep, char *errstr, size_t errstr_size) {
    char problem[512];
    if (!rdk_ready(problem, sizeof problem)) {
        snprintf(errstr, errstr_size, "kaudit plugin: %s", problem);
        return RD_KAFKA_RESP_ERR__INVALID_ARG;
    }
    Settings *settings = settings_new(NULL);
    if (settings == NULL) {
        snprintf(errstr, errstr_size, "kaudit plugin: out of memory");
        return RD_KAFKA_RESP_ERR__FAIL;
    }
    rd_kafka_resp_err_t err = add_conf_interceptors(conf, settings);
    if (err) {
        free(settings);
        snprintf(errstr, errstr_size, "kaudit plugin: adding its interceptors failed: %s", rdk.err2str(err));
    }
    return err;
}
