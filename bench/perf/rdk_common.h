/*
 * What rdk_produce.c and rdk_consume.c share: the monotonic clock, setting a librdkafka
 * property with the program's name in the error, and `-X key=value`.
 */
#ifndef RDK_COMMON_H
#define RDK_COMMON_H

#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define MB (1024.0 * 1024.0)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Sets one property; -1 (said on stderr, naming `who`) when librdkafka refuses it. */
static int set(const char *who, rd_kafka_conf_t *conf, const char *key, const char *value) {
    char err[512];
    if (rd_kafka_conf_set(conf, key, value, err, sizeof err) != RD_KAFKA_CONF_OK) {
        fprintf(stderr, "%s: %s=%s: %s\n", who, key, value, err);
        return -1;
    }
    return 0;
}

/* `-X key=value`: sets the property; -1 when it is malformed or refused. */
static int set_pair(const char *who, rd_kafka_conf_t *conf, const char *pair) {
    char key[256];
    const char *eq = strchr(pair, '=');
    if (!eq || (size_t)(eq - pair) >= sizeof key) {
        fprintf(stderr, "%s: -X %s: want key=value\n", who, pair);
        return -1;
    }
    memcpy(key, pair, (size_t)(eq - pair));
    key[eq - pair] = '\0';
    return set(who, conf, key, eq + 1);
}

#endif
