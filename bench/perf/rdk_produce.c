/*
 * rdk_produce: librdkafka's producer loop in C, without the Python binding.
 *
 * rdk_perf.py's produce mode makes a Python call and a delivery callback per record, and on this
 * 2-core machine that loop, not the broker, caps both brokers (docs/BENCHMARKS.md). This program
 * produces the same way (one fixed payload of --record-size uppercase letters copied into every
 * record, no key, librdkafka's default partitioner and batching, poll every 1,024 records, wait
 * 5 ms for room when the local queue is full) and prints rdk_perf.py's summary line, which is
 * Kafka ProducerPerformance's, so bench/perf/tools.py parses either.
 *
 *   cc -O2 -o rdk_produce rdk_produce.c -lrdkafka
 *   rdk_produce --bootstrap HOST:PORT --topic T --num-records N [--record-size S] [--acks A]
 *               [--timeout S] [-X key=value]...
 *
 * The latency of a record is produce() to its delivery report (rd_kafka_message_latency), for
 * every record. Needs librdkafka's headers (Debian: librdkafka-dev). Exit status 1 when a record
 * failed or was still undelivered at the timeout, 2 on a usage or client error.
 */
#include "rdk_common.h"

#include <librdkafka/rdkafka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


static double *latencies_ms;
static long long delivered, failed;
static char first_error[512];



static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
    (void)rk;
    (void)opaque;
    if (m->err) {
        if (failed++ == 0)
            snprintf(first_error, sizeof first_error, "%s", rd_kafka_err2str(m->err));
        return;
    }
    int64_t us = rd_kafka_message_latency(m);
    latencies_ms[delivered++] = us < 0 ? 0.0 : (double)us / 1000.0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* nearest rank, as Kafka's ProducerPerformance and rdk_perf.py */
static double percentile(const double *sorted, long long n, double q) {
    if (n == 0)
        return NAN;
    long long i = (long long)(q * (double)n);
    return sorted[i < n ? i : n - 1];
}

static int usage(void) {
    fprintf(stderr, "usage: rdk_produce --bootstrap HOST:PORT --topic T --num-records N "
                    "[--record-size S] [--acks A] [--timeout S] [-X key=value]...\n");
    return 2;
}

int main(int argc, char **argv) {
    const char *bootstrap = NULL, *topic = NULL, *acks = "all";
    long long want = -1, size = 1024;
    double timeout = 600.0;
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
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
        } else if (!strcmp(a, "--record-size")) {
            size = atoll(v);
        } else if (!strcmp(a, "--acks")) {
            acks = v;
        } else if (!strcmp(a, "--timeout")) {
            timeout = atof(v);
        } else if (!strcmp(a, "-X")) {
            if (set_pair("rdk_produce", conf, v))
                return 2;
        } else {
            return usage();
        }
    }
    if (!bootstrap || !topic || want < 0 || size < 0)
        return usage();
    if (set("rdk_produce", conf, "bootstrap.servers", bootstrap) || set("rdk_produce", conf, "acks", acks))
        return 2;
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);

    latencies_ms = malloc(sizeof(double) * (size_t)(want > 0 ? want : 1));
    char *payload = malloc((size_t)size + 1);
    if (!latencies_ms || !payload) {
        fprintf(stderr, "rdk_produce: out of memory for %lld records\n", want);
        return 2;
    }
    srand(0);
    for (long long i = 0; i < size; i++)
        payload[i] = (char)('A' + rand() % 26);

    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (!rk) {
        fprintf(stderr, "rdk_produce: rd_kafka_new: %s\n", err);
        return 2;
    }

    double start = now_s();
    for (long long i = 0; i < want; i++) {
        for (;;) {
            rd_kafka_resp_err_t e = rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                                      RD_KAFKA_V_VALUE(payload, (size_t)size), RD_KAFKA_V_END);
            if (!e)
                break;
            if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
                fprintf(stderr, "rdk_produce: produce: %s\n", rd_kafka_err2str(e));
                rd_kafka_destroy(rk);
                return 2;
            }
            rd_kafka_poll(rk, 5);
        }
        if ((i & 1023) == 0)
            rd_kafka_poll(rk, 0);
    }
    double deadline = start + timeout;
    while (rd_kafka_outq_len(rk) > 0 && now_s() < deadline)
        rd_kafka_flush(rk, 100);
    double elapsed = now_s() - start;
    int remaining = rd_kafka_outq_len(rk);
    rd_kafka_destroy(rk);

    long long sent = delivered;
    if (!strcmp(acks, "0"))
        sent = want - remaining - failed;
    if (remaining || failed)
        fprintf(stderr, "ERROR %d records undelivered, %lld failed: %s\n", remaining, failed, first_error);
    qsort(latencies_ms, (size_t)delivered, sizeof(double), cmp_double);
    double sum = 0.0;
    for (long long i = 0; i < delivered; i++)
        sum += latencies_ms[i];
    double avg = delivered ? sum / (double)delivered : NAN;
    double max = delivered ? latencies_ms[delivered - 1] : NAN;
    double rate = elapsed > 0 ? (double)sent / elapsed : 0.0;
    printf("%lld records sent, %.6f records/sec (%.2f MB/sec), %.2f ms avg latency, %.2f ms max latency, "
           "%.0f ms 50th, %.0f ms 95th, %.0f ms 99th, %.0f ms 99.9th.\n",
           sent, rate, rate * (double)size / MB, avg, max, percentile(latencies_ms, delivered, 0.5),
           percentile(latencies_ms, delivered, 0.95), percentile(latencies_ms, delivered, 0.99),
           percentile(latencies_ms, delivered, 0.999));
    return remaining || failed ? 1 : 0;
}
