import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The Java kafka-clients side of bench/conformance: one action per invocation, driven by
 * bench/conformance/clients/java_client.py, which does all the verifying.
 *
 * <pre>
 *   Conformance create-topic BOOTSTRAP TOPIC PARTITIONS        -> PARTITIONS n
 *   Conformance produce BOOTSTRAP TOPIC ACKS IDEMPOTENT         stdin: partition\tkey\tvalue
 *                                                               -> DELIVERED\tp\toffset\tkey\tvalue
 *   Conformance read BOOTSTRAP TOPIC ISOLATION P,P,...          -> REC\tp\toffset\tkey\tvalue
 *   Conformance group-consume BOOTSTRAP TOPIC GROUP EXPECTED    -> REC lines, then commitSync
 *   Conformance transaction BOOTSTRAP IN OUT GROUP TXNID EXPECTED   stdin: abort records
 *                                                               -> CONSUMED lines
 * </pre>
 * Any failure prints "ERROR message" and exits 1. Every wait is bounded (TIMEOUT).
 */
public final class Conformance {
    private static final Duration TIMEOUT = Duration.ofSeconds(60);
    private static final Duration GRACE = Duration.ofSeconds(1);

    private Conformance() {
    }

    public static void main(String[] args) {
        try {
            run(args);
        } catch (Throwable t) {
            Throwable cause = t instanceof ExecutionException && t.getCause() != null ? t.getCause() : t;
            System.out.println("ERROR " + cause.getClass().getSimpleName() + ": "
                    + String.valueOf(cause.getMessage()).replace('\n', ' '));
            System.out.flush();
            System.exit(1);
        }
        System.out.flush();
        System.exit(0);
    }

    private static void run(String[] a) throws Exception {
        if (a.length < 2) {
            throw new IllegalArgumentException("usage: see the class comment");
        }
        switch (a[0]) {
            case "create-topic" -> createTopic(a[1], a[2], Integer.parseInt(a[3]));
            case "produce" -> produce(a[1], a[2], a[3], Boolean.parseBoolean(a[4]));
            case "read" -> read(a[1], a[2], a[3], a[4]);
            case "group-consume" -> groupConsume(a[1], a[2], a[3], Integer.parseInt(a[4]));
            case "transaction" -> transaction(a[1], a[2], a[3], a[4], a[5], Integer.parseInt(a[6]));
            default -> throw new IllegalArgumentException("unknown action " + a[0]);
        }
    }

    private static void createTopic(String bootstrap, String topic, int partitions) throws Exception {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(p)) {
            try {
                admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all()
                        .get(TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
            } catch (ExecutionException e) {
                if (!(e.getCause() instanceof TopicExistsException)) {
                    throw e;
                }
            }
        }
        try (KafkaConsumer<String, String> c = consumer(bootstrap, null, "read_uncommitted")) {
            long deadline = System.nanoTime() + TIMEOUT.toNanos();
            int seen = 0;
            while (System.nanoTime() < deadline) {
                List<PartitionInfo> infos = c.partitionsFor(topic, Duration.ofSeconds(10));
                seen = infos == null ? 0 : infos.size();
                if (seen >= partitions) {
                    break;
                }
                Thread.sleep(200);
            }
            System.out.println("PARTITIONS " + seen);
        }
    }

    private static List<String[]> readStdinRecords() throws Exception {
        List<String[]> out = new ArrayList<>();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line; (line = in.readLine()) != null; ) {
            if (!line.isEmpty()) {
                String[] f = line.split("\t", 3);
                if (f.length != 3) {
                    throw new IllegalArgumentException("bad record line: " + line);
                }
                out.add(f);
            }
        }
        return out;
    }

    private static Properties producerProps(String bootstrap) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "60000");
        return p;
    }

    private static void produce(String bootstrap, String topic, String acks, boolean idempotent) throws Exception {
        List<String[]> records = readStdinRecords();
        Properties p = producerProps(bootstrap);
        p.put(ProducerConfig.ACKS_CONFIG, acks);
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, Boolean.toString(idempotent));
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            List<Future<RecordMetadata>> futures = new ArrayList<>();
            for (String[] r : records) {
                futures.add(producer.send(new ProducerRecord<>(topic, Integer.parseInt(r[0]), r[1], r[2])));
            }
            // flush() blocks until every send has completed: with acks=0 a request completes once it
            // is written to the socket (there is no response). No fixed sleep: close() is graceful.
            producer.flush();
            for (int i = 0; i < records.size(); i++) {
                RecordMetadata md = futures.get(i).get(TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
                long offset = md.hasOffset() ? md.offset() : -1; // acks=0: no offset
                System.out.println("DELIVERED\t" + md.partition() + "\t" + offset + "\t" + records.get(i)[1]
                        + "\t" + records.get(i)[2]);
            }
        }
    }

    private static KafkaConsumer<String, String> consumer(String bootstrap, String group, String isolation) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        if (group != null) {
            p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        }
        return new KafkaConsumer<>(p);
    }

    private static void print(String tag, ConsumerRecord<String, String> r) {
        System.out.println(tag + "\t" + r.partition() + "\t" + r.offset() + "\t" + (r.key() == null ? "" : r.key())
                + "\t" + (r.value() == null ? "" : r.value()));
    }

    private static void read(String bootstrap, String topic, String isolation, String partitions) throws Exception {
        List<TopicPartition> tps = new ArrayList<>();
        for (String s : partitions.split(",")) {
            tps.add(new TopicPartition(topic, Integer.parseInt(s)));
        }
        try (KafkaConsumer<String, String> c = consumer(bootstrap, null, isolation)) {
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> end = c.endOffsets(tps, TIMEOUT);
            long deadline = System.nanoTime() + TIMEOUT.toNanos();
            while (!reached(c, end)) {
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("read stopped short of the end offsets " + end);
                }
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                    print("REC", r);
                }
            }
        }
    }

    private static boolean reached(KafkaConsumer<String, String> c, Map<TopicPartition, Long> end) {
        for (Map.Entry<TopicPartition, Long> e : end.entrySet()) {
            if (c.position(e.getKey(), TIMEOUT) < e.getValue()) {
                return false;
            }
        }
        return true;
    }

    private static List<ConsumerRecord<String, String>> pollUntil(KafkaConsumer<String, String> c, int expected,
                                                                  boolean grace) {
        List<ConsumerRecord<String, String>> out = new ArrayList<>();
        long deadline = System.nanoTime() + TIMEOUT.toNanos();
        while (out.size() < expected) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("consumer got " + out.size() + " of " + expected + " records");
            }
            c.poll(Duration.ofMillis(500)).forEach(out::add);
        }
        if (grace) {
            c.poll(GRACE).forEach(out::add);
        }
        return out;
    }

    private static void groupConsume(String bootstrap, String topic, String group, int expected) {
        try (KafkaConsumer<String, String> c = consumer(bootstrap, group, "read_uncommitted")) {
            c.subscribe(Collections.singletonList(topic));
            for (ConsumerRecord<String, String> r : pollUntil(c, expected, true)) {
                print("REC", r);
            }
            c.commitSync(TIMEOUT);
        }
    }

    private static void transaction(String bootstrap, String in, String out, String group, String txnId,
                                    int expected) throws Exception {
        List<String[]> abortRecords = readStdinRecords();
        Properties p = producerProps(bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        try (KafkaConsumer<String, String> c = consumer(bootstrap, group, "read_committed");
             KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            c.subscribe(Collections.singletonList(in));
            List<ConsumerRecord<String, String>> consumed = pollUntil(c, expected, false);
            producer.initTransactions();
            producer.beginTransaction();
            for (ConsumerRecord<String, String> r : consumed) {
                producer.send(new ProducerRecord<>(out, r.partition(), r.key(), "T:" + r.value()));
            }
            Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
            Set<TopicPartition> assignment = c.assignment();
            for (TopicPartition tp : assignment) {
                offsets.put(tp, new OffsetAndMetadata(c.position(tp, TIMEOUT)));
            }
            producer.sendOffsetsToTransaction(offsets, c.groupMetadata());
            producer.commitTransaction();
            producer.beginTransaction();
            for (String[] r : abortRecords) {
                producer.send(new ProducerRecord<>(out, Integer.parseInt(r[0]), r[1], r[2]));
            }
            producer.flush();
            producer.abortTransaction();
            for (ConsumerRecord<String, String> r : consumed) {
                print("CONSUMED", r);
            }
        }
    }
}
