// Small helper for scripts/kafka.sh, using only the Kafka client classes that the
// broker jars in <repo>/.kafka/libs already contain. Compiled once by kafka.sh
// into <repo>/.kafka/tools (or run directly: java -cp '.kafka/libs/*' KafkaCheck.java ...).
//
//   KafkaCheck ready    <bootstrap> <timeoutMs>   wait until the broker really answers
//                                                  (describeCluster + listTopics), exit 0;
//                                                  exit 1 with the last error on timeout
//   KafkaCheck selftest <bootstrap>               create a topic, produce/consume, run a
//                                                  committed and an aborted transaction and a
//                                                  consume-transform-produce (exactly-once)
//                                                  step, check what read_committed sees,
//                                                  delete the topics; exit 0 if all is well
//   KafkaCheck create   <bootstrap> <topic> <partitions>   create a topic; exit 0 if it exists
//   KafkaCheck dump     <bootstrap> <topic> <outFile> [--timestamps]
//                                                  every record of the topic as a read_committed
//                                                  KafkaConsumer sees it (assign() all partitions,
//                                                  from the beginning up to endOffsets, which for
//                                                  read_committed is the last stable offset), one
//                                                  "partition<TAB>offset<TAB>value" line each
//                                                  ("partition<TAB>offset<TAB>timestamp<TAB>value"
//                                                  with --timestamps). It first waits (up to
//                                                  FV_DUMP_STABLE_WAIT_MS, default 120 s) until no
//                                                  transaction is open (LSO = high watermark).
//                                                  FV_DUMP_ISOLATION=read_uncommitted dumps every
//                                                  record up to the high watermark instead (for
//                                                  diagnosis: what aborted transactions held)
//   KafkaCheck lag      <bootstrap> <topic> <group>...   per group: committed offsets vs end
//                                                  offsets, one "group<TAB>totalLag<TAB>p:committed:end,..."
//                                                  line each (committed -1: none yet)
import java.io.BufferedWriter;
import java.io.FileOutputStream;
import java.io.OutputStreamWriter;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.DescribeClusterOptions;
import org.apache.kafka.clients.admin.ListConsumerGroupOffsetsOptions;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionListing;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.ListTopicsOptions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class KafkaCheck {
    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            System.err.println("usage: KafkaCheck ready <bootstrap> <timeoutMs> | selftest <bootstrap>"
                    + " | create <bootstrap> <topic> <partitions> | dump <bootstrap> <topic> <outFile> [--timestamps]"
                    + " | lag <bootstrap> <topic> <group>... | transactions <bootstrap> <topic> <group>...");
            System.exit(2);
        }
        switch (args[0]) {
            case "ready":
                System.exit(ready(args[1], args.length > 2 ? Long.parseLong(args[2]) : 90_000L));
                break;
            case "selftest":
                System.exit(selftest(args[1]));
                break;
            case "create":
                System.exit(create(args[1], args[2], Integer.parseInt(args[3])));
                break;
            case "dump": {
                String env = System.getenv("FV_DUMP_STABLE_WAIT_MS");
                long stableWaitMs = env == null || env.isEmpty() ? 120_000L : Long.parseLong(env);
                boolean timestamps = args.length > 4 && args[4].equals("--timestamps");
                System.exit(dump(args[1], args[2], args[3], timestamps, stableWaitMs));
                break;
            }
            case "lag":
                System.exit(lag(args[1], args[2], List.of(args).subList(3, args.length)));
                break;
            case "transactions":
                System.exit(transactions(args[1], args[2], List.of(args).subList(3, args.length)));
                break;
            default:
                System.err.println("unknown mode " + args[0]);
                System.exit(2);
        }
    }

    static Properties adminProps(String bootstrap, int requestTimeoutMs) {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.CLIENT_ID_CONFIG, "fv-kafka-check");
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, requestTimeoutMs);
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, requestTimeoutMs);
        p.put(AdminClientConfig.RECONNECT_BACKOFF_MS_CONFIG, 200);
        p.put(AdminClientConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, 1000);
        p.put(AdminClientConfig.RETRY_BACKOFF_MS_CONFIG, 200);
        return p;
    }

    /** Poll until describeCluster returns a broker and a controller and listTopics works. */
    static int ready(String bootstrap, long timeoutMs) {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(timeoutMs);
        String last = "no attempt made";
        try (Admin admin = Admin.create(adminProps(bootstrap, 3000))) {
            while (System.nanoTime() < deadline) {
                try {
                    var dc = admin.describeCluster(new DescribeClusterOptions().timeoutMs(3000));
                    Collection<Node> nodes = dc.nodes().get(4, TimeUnit.SECONDS);
                    Node controller = dc.controller().get(4, TimeUnit.SECONDS);
                    String clusterId = dc.clusterId().get(4, TimeUnit.SECONDS);
                    if (!nodes.isEmpty() && controller != null && !controller.isEmpty()) {
                        Set<String> topics = admin.listTopics(new ListTopicsOptions().timeoutMs(3000).listInternal(true))
                                .names().get(4, TimeUnit.SECONDS);
                        System.out.println("broker ready: cluster " + clusterId + ", nodes " + nodes
                                + ", " + topics.size() + " topic(s)");
                        return 0;
                    }
                    last = "cluster has no broker/controller yet: nodes=" + nodes + " controller=" + controller;
                } catch (Exception e) {
                    Throwable c = e.getCause() != null ? e.getCause() : e;
                    last = c.getClass().getSimpleName() + ": " + c.getMessage();
                }
                sleep(500);
            }
        }
        System.err.println("broker did not answer at " + bootstrap + " within " + timeoutMs + " ms; last error: " + last);
        return 1;
    }

    static int selftest(String bootstrap) throws Exception {
        String suffix = Long.toString(System.currentTimeMillis(), 36);
        String in = "fv-selftest-in-" + suffix;
        String out = "fv-selftest-out-" + suffix;
        String compacted = "fv-selftest-compacted-" + suffix;
        long t0 = System.nanoTime();
        try (Admin admin = Admin.create(adminProps(bootstrap, 30_000))) {
            admin.createTopics(List.of(
                    new NewTopic(in, 1, (short) 1),
                    new NewTopic(out, 1, (short) 1),
                    new NewTopic(compacted, 1, (short) 1).configs(Map.of("cleanup.policy", "compact"))
            )).all().get(30, TimeUnit.SECONDS);
            step(t0, "created topics " + in + ", " + out + ", " + compacted + " (compacted)");

            // 1. plain idempotent producer -> consumer
            try (KafkaProducer<String, String> p = new KafkaProducer<>(producerProps(bootstrap, null))) {
                p.send(new ProducerRecord<>(in, "k1", "hello")).get(30, TimeUnit.SECONDS);
                p.send(new ProducerRecord<>(in, "k2", "world")).get(30, TimeUnit.SECONDS);
                p.send(new ProducerRecord<>(compacted, "k", "v1")).get(30, TimeUnit.SECONDS);
                p.send(new ProducerRecord<>(compacted, "k", "v2")).get(30, TimeUnit.SECONDS);
            }
            step(t0, "produced 2 records to " + in + " and 2 to " + compacted);
            List<String> got = readAll(bootstrap, in, 2, "read_uncommitted");
            expect(got.equals(List.of("k1=hello", "k2=world")), "plain consume got " + got);
            step(t0, "consumed " + got);

            // 2. transactional producer: one committed, one aborted transaction on `out`
            try (KafkaProducer<String, String> p = new KafkaProducer<>(producerProps(bootstrap, "fv-selftest-tx-" + suffix))) {
                p.initTransactions();
                step(t0, "initTransactions ok");
                p.beginTransaction();
                p.send(new ProducerRecord<>(out, "t1", "committed"));
                p.commitTransaction();
                step(t0, "committed transaction");
                p.beginTransaction();
                p.send(new ProducerRecord<>(out, "t2", "aborted")).get(30, TimeUnit.SECONDS);
                p.abortTransaction();
                step(t0, "aborted transaction");
            }

            // 3. consume-transform-produce with sendOffsetsToTransaction (exactly-once step)
            String group = "fv-selftest-eos-" + suffix;
            Properties cp = consumerProps(bootstrap, group, "read_committed");
            try (KafkaConsumer<String, String> c = new KafkaConsumer<>(cp);
                 KafkaProducer<String, String> p = new KafkaProducer<>(producerProps(bootstrap, "fv-selftest-eos-tx-" + suffix))) {
                p.initTransactions();
                c.subscribe(List.of(in));
                List<ConsumerRecord<String, String>> batch = new ArrayList<>();
                long deadline = System.currentTimeMillis() + 30_000;
                while (batch.size() < 2 && System.currentTimeMillis() < deadline) {
                    c.poll(Duration.ofMillis(500)).forEach(batch::add);
                }
                expect(batch.size() == 2, "eos consumer got " + batch.size() + " records");
                p.beginTransaction();
                for (ConsumerRecord<String, String> r : batch) {
                    p.send(new ProducerRecord<>(out, r.key(), r.value().toUpperCase()));
                }
                TopicPartition tp = new TopicPartition(in, 0);
                long next = batch.get(batch.size() - 1).offset() + 1;
                p.sendOffsetsToTransaction(Map.of(tp, new OffsetAndMetadata(next)), c.groupMetadata());
                p.commitTransaction();
                step(t0, "consume-transform-produce transaction committed with offsets (group " + group + ")");
                try (Admin admin2 = Admin.create(adminProps(bootstrap, 30_000))) {
                    var committed = admin2.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get(30, TimeUnit.SECONDS);
                    expect(committed.get(tp) != null && committed.get(tp).offset() == next,
                            "group offset after transaction: " + committed);
                }
            }

            // 4. read_committed must see the committed + transformed records, never the aborted one
            List<String> rc = readAll(bootstrap, out, 3, "read_committed");
            expect(rc.equals(List.of("t1=committed", "k1=HELLO", "k2=WORLD")), "read_committed on " + out + " got " + rc);
            step(t0, "read_committed sees " + rc + " (aborted record hidden)");
            List<String> ru = readAll(bootstrap, out, 4, "read_uncommitted");
            expect(ru.contains("t2=aborted"), "read_uncommitted should see the aborted record, got " + ru);

            admin.deleteTopics(List.of(in, out, compacted)).all().get(30, TimeUnit.SECONDS);
            step(t0, "deleted selftest topics");
        }
        System.out.println("selftest OK");
        return 0;
    }

    static int create(String bootstrap, String topic, int partitions) throws Exception {
        try (Admin admin = Admin.create(adminProps(bootstrap, 30_000))) {
            try {
                admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all().get(30, TimeUnit.SECONDS);
                System.out.println("created " + topic + " (" + partitions + " partitions)");
            } catch (java.util.concurrent.ExecutionException e) {
                if (!(e.getCause() instanceof TopicExistsException)) throw e;
                System.out.println(topic + " exists");
            }
        }
        return 0;
    }

    static List<TopicPartition> partitionsOf(Admin admin, String topic) throws Exception {
        var description = admin.describeTopics(List.of(topic)).allTopicNames().get(30, TimeUnit.SECONDS).get(topic);
        List<TopicPartition> tps = new ArrayList<>();
        description.partitions().forEach((p) -> tps.add(new TopicPartition(topic, p.partition())));
        tps.sort((a, b) -> Integer.compare(a.partition(), b.partition()));
        return tps;
    }

    static Map<TopicPartition, Long> listEnd(Admin admin, List<TopicPartition> tps, IsolationLevel isolation) throws Exception {
        Map<TopicPartition, OffsetSpec> specs = new HashMap<>();
        for (TopicPartition tp : tps) specs.put(tp, OffsetSpec.latest());
        var result = admin.listOffsets(specs, new ListOffsetsOptions(isolation)).all().get(30, TimeUnit.SECONDS);
        Map<TopicPartition, Long> out = new HashMap<>();
        result.forEach((tp, info) -> out.put(tp, info.offset()));
        return out;
    }

    /**
     * Every record of `topic` as the real read_committed KafkaConsumer sees it. An independent
     * reader for judging outputs: no group, assign() and seekToBeginning on every partition, poll
     * until each position reaches the consumer's endOffsets (the last stable offset).
     */
    static int dump(String bootstrap, String topic, String outFile, boolean timestamps, long stableWaitMs) throws Exception {
        long t0 = System.nanoTime();
        List<TopicPartition> tps;
        try (Admin admin = Admin.create(adminProps(bootstrap, 30_000))) {
            tps = partitionsOf(admin, topic);
            // A transaction still open (a producer that died mid-transaction and was not fenced)
            // holds the LSO back until the broker aborts it: wait for that, then say so if it stays.
            long deadline = System.currentTimeMillis() + stableWaitMs;
            while (true) {
                Map<TopicPartition, Long> lso = listEnd(admin, tps, IsolationLevel.READ_COMMITTED);
                Map<TopicPartition, Long> hwm = listEnd(admin, tps, IsolationLevel.READ_UNCOMMITTED);
                if (lso.equals(hwm)) break;
                if (System.currentTimeMillis() > deadline) {
                    StringBuilder open = new StringBuilder();
                    for (TopicPartition tp : tps) {
                        if (!lso.get(tp).equals(hwm.get(tp))) open.append(" ").append(tp.partition()).append(":lso=").append(lso.get(tp)).append(",hwm=").append(hwm.get(tp));
                    }
                    System.err.println("dump " + topic + ": WARNING: transactions still open after " + stableWaitMs + " ms;" + open
                            + " (records past the LSO are not dumped)");
                    break;
                }
                sleep(1000);
            }
        }
        String isolation = "read_uncommitted".equals(System.getenv("FV_DUMP_ISOLATION")) ? "read_uncommitted" : "read_committed";
        Properties p = consumerProps(bootstrap, "unused", isolation);
        p.remove(ConsumerConfig.GROUP_ID_CONFIG);
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 5000);
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, "fv-kafka-check-dump");
        long count = 0;
        Map<TopicPartition, Long> end;
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p);
             BufferedWriter w = new BufferedWriter(new OutputStreamWriter(new FileOutputStream(outFile), StandardCharsets.UTF_8), 1 << 20)) {
            c.assign(tps);
            c.seekToBeginning(tps);
            end = c.endOffsets(tps, Duration.ofSeconds(30));
            long lastProgress = System.currentTimeMillis();
            long lastCount = -1;
            while (true) {
                boolean done = true;
                for (TopicPartition tp : tps) {
                    if (c.position(tp, Duration.ofSeconds(30)) < end.get(tp)) { done = false; break; }
                }
                if (done) break;
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                    if (r.offset() >= end.get(new TopicPartition(r.topic(), r.partition()))) continue;
                    w.write(Integer.toString(r.partition()));
                    w.write('\t');
                    w.write(Long.toString(r.offset()));
                    w.write('\t');
                    if (timestamps) {
                        w.write(Long.toString(r.timestamp()));
                        w.write('\t');
                    }
                    w.write(r.value() == null ? "null" : r.value());
                    w.write('\n');
                    count++;
                }
                if (count != lastCount) {
                    lastCount = count;
                    lastProgress = System.currentTimeMillis();
                } else if (System.currentTimeMillis() - lastProgress > 60_000) {
                    StringBuilder at = new StringBuilder();
                    for (TopicPartition tp : tps) at.append(" ").append(tp.partition()).append(":").append(c.position(tp)).append("/").append(end.get(tp));
                    System.err.println("dump " + topic + ": FAILED: no progress for 60 s at" + at);
                    return 1;
                }
            }
        }
        long ends = 0;
        for (long e : end.values()) ends += e;
        System.out.println("dump " + topic + (isolation.equals("read_committed") ? "" : " (" + isolation + ")") + ": " + count + " records from " + tps.size() + " partitions (end offsets sum " + ends
                + ") in " + TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0) + " ms -> " + outFile);
        return 0;
    }

    /** Per group: the committed offsets of `topic` against its end offsets. */
    static int lag(String bootstrap, String topic, List<String> groups) throws Exception {
        try (Admin admin = Admin.create(adminProps(bootstrap, 15_000))) {
            List<TopicPartition> tps = partitionsOf(admin, topic);
            Map<TopicPartition, Long> end = listEnd(admin, tps, IsolationLevel.READ_COMMITTED);
            for (String group : groups) {
                Map<TopicPartition, OffsetAndMetadata> committed =
                        admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get(15, TimeUnit.SECONDS);
                long total = 0;
                StringBuilder parts = new StringBuilder();
                for (TopicPartition tp : tps) {
                    OffsetAndMetadata o = committed.get(tp);
                    long at = o == null ? -1 : o.offset();
                    long e = end.get(tp);
                    total += e - Math.max(at, 0);
                    if (parts.length() > 0) parts.append(",");
                    parts.append(tp.partition()).append(":").append(at).append(":").append(e);
                }
                System.out.println(group + "\t" + total + "\t" + parts);
            }
        }
        return 0;
    }

    /**
     * Every transaction the coordinator knows that has not completed (state, producer id and epoch,
     * age, partitions), then, per group, the partitions of the topic whose committed offset is not
     * stable (a transactional offset commit is pending): the Java admin retries those until its
     * timeout, so each partition is asked on its own.
     */
    static int transactions(String bootstrap, String topic, List<String> groups) throws Exception {
        try (Admin admin = Admin.create(adminProps(bootstrap, 15_000))) {
            Collection<TransactionListing> all = admin.listTransactions().all().get(15, TimeUnit.SECONDS);
            List<String> ids = new ArrayList<>();
            for (TransactionListing t : all) ids.add(t.transactionalId());
            Map<String, TransactionDescription> described = ids.isEmpty() ? Map.of() : admin.describeTransactions(ids).all().get(15, TimeUnit.SECONDS);
            int open = 0;
            for (Map.Entry<String, TransactionDescription> e : described.entrySet()) {
                TransactionDescription d = e.getValue();
                String state = d.state().toString();
                String s = state.replace("_", "").toLowerCase();
                if (s.equals("completecommit") || s.equals("completeabort") || s.equals("empty")) continue;
                open++;
                long age = d.transactionStartTimeMs().isPresent() ? System.currentTimeMillis() - d.transactionStartTimeMs().getAsLong() : -1;
                System.out.println("transaction\t" + e.getKey() + "\t" + state + "\tproducer " + d.producerId() + "/" + d.producerEpoch()
                        + "\tage_ms " + age + "\t" + d.topicPartitions());
            }
            System.out.println("transactions\t" + described.size() + " known, " + open + " not complete");
            List<TopicPartition> tps = partitionsOf(admin, topic);
            for (String group : groups) {
                StringBuilder unstable = new StringBuilder();
                for (TopicPartition tp : tps) {
                    ListConsumerGroupOffsetsOptions options = new ListConsumerGroupOffsetsOptions().requireStable(true).timeoutMs(3_000);
                    try {
                        admin.listConsumerGroupOffsets(Map.of(group, new org.apache.kafka.clients.admin.ListConsumerGroupOffsetsSpec().topicPartitions(List.of(tp))), options)
                                .partitionsToOffsetAndMetadata(group).get(5, TimeUnit.SECONDS);
                    } catch (Exception ex) {
                        if (unstable.length() > 0) unstable.append(",");
                        unstable.append(tp.partition());
                    }
                }
                System.out.println("unstable\t" + group + "\t" + (unstable.length() == 0 ? "-" : unstable));
            }
        }
        return 0;
    }

    static Properties producerProps(String bootstrap, String transactionalId) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true);
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, 30_000);
        if (transactionalId != null) {
            p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        }
        return p;
    }

    static Properties consumerProps(String bootstrap, String group, String isolation) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        return p;
    }

    /** Read a topic from the beginning with manual assignment until `expected` records or 20 s. */
    static List<String> readAll(String bootstrap, String topic, int expected, String isolation) {
        Properties p = consumerProps(bootstrap, "unused", isolation);
        p.remove(ConsumerConfig.GROUP_ID_CONFIG);
        List<String> got = new ArrayList<>();
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
            TopicPartition tp = new TopicPartition(topic, 0);
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            long deadline = System.currentTimeMillis() + 20_000;
            while (System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(300))) {
                    got.add(r.key() + "=" + r.value());
                }
                if (got.size() >= expected && c.position(tp) >= c.endOffsets(List.of(tp)).get(tp)) {
                    break;
                }
            }
        }
        return got;
    }

    static void expect(boolean ok, String what) {
        if (!ok) {
            throw new IllegalStateException("selftest FAILED: " + what);
        }
    }

    static void step(long t0, String what) {
        System.out.printf("  [%5d ms] %s%n", TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0), what);
    }

    static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
