/*
 * rdk_consume: librdkafka's consumer read loop in C, without the Python binding.
 *
 * rdk_perf.py's consume mode creates a Python object per record, and on this 2-core machine that
 * loop, not the broker, caps both brokers near 1 M records/s. This program reads the same way
 * (assign every partition from the beginning, no group protocol, batches of up to 10,000 from the
 * consumer queue) and prints rdk_perf.py's line, so bench/perf/tools.py parses either.
 *
 *   cc -O2 -o rdk_consume rdk_consume.c -lrdkafka
 *   rdk_consume --bootstrap HOST:PORT --topic T --num-records N [--timeout S] [-X key=value]...
 *
 * Needs librdkafka's headers (Debian: librdkafka-dev). Exit status 1 when fewer than N records
 * arrived before the timeout, 2 on a usage or client error.
 */
#include "rdk_common.h"

#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BATCH 10000



static int usage(void) {
    fprintf(stderr, "usage: rdk_consume --bootstrap HOST:PORT --topic T --num-records N "
                    "[--timeout S] [-X key=value]...\n");
    return 2;
}

int main(int argc, char **argv) {
    const char *bootstrap = NULL, *topic = NULL;
    long long want = -1;
    double timeout = 600.0;
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    /* the same settings as rdk_perf.py's consumer */
    if (set("rdk_consume", conf, "group.id", "rdk-perf-assign") ||
        set("rdk_consume", conf, "enable.auto.commit", "false") ||
        set("rdk_consume", conf, "enable.auto.offset.store", "false"))
        return 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc)
            return usage();
        const char *v = argv[++i];
        if (!strcmp(a, "--bootstrap")) {
            bootstrap = v;
        } else if (!strcmp(a, "--topic")) {
            topic = v;
        } else if (!strcmp(a, "--num-records")) {
            want = atoll(v);
        } else if (!strcmp(a, "--timeout")) {
            timeout = atof(v);
        } else if (!strcmp(a, "-X")) {
            if (set_pair("rdk_consume", conf, v))
                return 2;
        } else {
            return usage();
        }
    }
    if (!bootstrap || !topic || want < 0)
        return usage();
    if (set("rdk_consume", conf, "bootstrap.servers", bootstrap))
        return 2;

    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
    if (!rk) {
        fprintf(stderr, "rdk_consume: rd_kafka_new: %s\n", err);
        return 2;
    }
    rd_kafka_poll_set_consumer(rk);

    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 0, rkt, &md, 30000);
    if (e || md->topic_cnt != 1 || md->topics[0].err) {
        fprintf(stderr, "rdk_consume: metadata for %s: %s\n", topic,
                rd_kafka_err2str(e ? e : md->topic_cnt == 1 ? md->topics[0].err : RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC));
        return 2;
    }
    rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(md->topics[0].partition_cnt);
    for (int i = 0; i < md->topics[0].partition_cnt; i++)
        rd_kafka_topic_partition_list_add(parts, topic, md->topics[0].partitions[i].id)->offset =
            RD_KAFKA_OFFSET_BEGINNING;
    rd_kafka_metadata_destroy(md);
    rd_kafka_topic_destroy(rkt);
    if ((e = rd_kafka_assign(rk, parts))) {
        fprintf(stderr, "rdk_consume: assign: %s\n", rd_kafka_err2str(e));
        return 2;
    }
    rd_kafka_topic_partition_list_destroy(parts);

    rd_kafka_queue_t *q = rd_kafka_queue_get_consumer(rk);
    static rd_kafka_message_t *batch[BATCH];
    long long count = 0, bytes = 0;
    double first = -1.0, last = 0.0, deadline = now_s() + timeout;
    int failed = 0;
    while (count < want && now_s() < deadline && !failed) {
        ssize_t n = rd_kafka_consume_batch_queue(q, 1000, batch, BATCH);
        if (n < 0) {
            fprintf(stderr, "rdk_consume: consume: %s\n", rd_kafka_err2str(rd_kafka_last_error()));
            break;
        }
        for (ssize_t i = 0; i < n; i++) {
            rd_kafka_message_t *m = batch[i];
            if (m->err && m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
                fprintf(stderr, "rdk_consume: %s\n", rd_kafka_message_errstr(m));
                failed = 1;
            } else if (!m->err) {
                if (first < 0)
                    first = now_s();
                count++;
                bytes += (long long)m->len;
            }
            rd_kafka_message_destroy(m);
        }
        last = now_s();
    }
    double elapsed = first < 0 ? 0.0 : last - first;
    rd_kafka_queue_destroy(q);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    double rate = elapsed > 0 ? (double)count / elapsed : 0.0;
    printf("%lld records consumed, %.6f records/sec (%.2f MB/sec), %.0f ms elapsed.\n", count, rate,
           elapsed > 0 ? (double)bytes / MB / elapsed : 0.0, elapsed * 1000.0);
    if (count < want) {
        fprintf(stderr, "ERROR only %lld of %lld records consumed before the timeout\n", count, want);
        return 1;
    }
    return failed ? 2 : 0;
}
