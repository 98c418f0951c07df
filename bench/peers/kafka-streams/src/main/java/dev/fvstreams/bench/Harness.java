package dev.fvstreams.bench;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.atomic.AtomicLong;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.common.utils.Utils;

/** The harness side of the benchmark: topics, loading, pacing, and the read_committed counter. */
final class Harness {
  private Harness() {}

  static Admin admin(String brokers) {
    Properties p = new Properties();
    p.put("bootstrap.servers", brokers);
    return Admin.create(p);
  }

  /** create NAME:PARTITIONS ... (existing topics are left as they are). */
  static void create(String brokers, List<String> specs) throws Exception {
    try (Admin admin = admin(brokers)) {
      Set<String> existing = admin.listTopics().names().get();
      List<NewTopic> topics = new ArrayList<>();
      for (String s : specs) {
        String[] parts = s.split(":");
        if (!existing.contains(parts[0])) topics.add(new NewTopic(parts[0], Integer.parseInt(parts[1]), (short) 1));
      }
      admin.createTopics(topics).all().get();
    }
  }

  /** delete-prefix PREFIX ...: deletes every topic whose name starts with a prefix. */
  static void deletePrefix(String brokers, List<String> prefixes) throws Exception {
    try (Admin admin = admin(brokers)) {
      Set<String> doomed = new HashSet<>();
      for (String t : admin.listTopics().names().get()) for (String p : prefixes) if (t.startsWith(p)) doomed.add(t);
      if (!doomed.isEmpty()) admin.deleteTopics(doomed).all().get();
      System.out.println("{\"deleted\":" + doomed.size() + "}");
    }
  }

  static KafkaProducer<String, String> producer(String brokers) {
    Properties p = new Properties();
    p.put("bootstrap.servers", brokers);
    p.put("key.serializer", StringSerializer.class.getName());
    p.put("value.serializer", StringSerializer.class.getName());
    p.put("linger.ms", "5");
    p.put("batch.size", "262144");
    p.put("compression.type", "none");
    return new KafkaProducer<>(p);
  }

  /** load TOPIC N T0: N rows keyed by customer, record time = event time, then one closer per partition. */
  static void load(String brokers, String topic, long n, long t0) throws Exception {
    try (KafkaProducer<String, String> producer = producer(brokers)) {
      int partitions = producer.partitionsFor(topic).size();
      for (long i = 0; i < n; i++) {
        producer.send(new ProducerRecord<>(topic, null, Rows.ts(i, n, t0), Rows.key(i), Rows.row(i, n, t0, 0)));
      }
      for (int p = 0; p < partitions; p++) {
        producer.send(new ProducerRecord<>(topic, p, Rows.closerTs(t0), closerKey(p, partitions), Rows.closer(p, t0)));
      }
      producer.flush();
      System.out.println("{\"loaded\":" + n + ",\"partitions\":" + partitions + ",\"expected\":" + Rows.expectedJson(n, t0, partitions) + "}");
    }
  }

  /** expected N T0 PARTITIONS: the outputs each workload must produce. */
  static void expected(long n, long t0, int partitions) {
    System.out.println(Rows.expectedJson(n, t0, partitions));
  }

  /**
   * pace TOPIC RATE SECONDS [START_AT_MS]: rows at a fixed rate (in 10 ms slots), each carrying
   * its send time in `sentAt` (wall clock ms). Event time is the send time, so windows behave as
   * live data. With START_AT_MS the first row goes at that wall-clock time, so the JVM can start
   * while the engine joins its group.
   */
  static void pace(String brokers, String topic, int rate, int seconds, long startAt) throws Exception {
    Properties p = new Properties();
    p.put("bootstrap.servers", brokers);
    p.put("key.serializer", StringSerializer.class.getName());
    p.put("value.serializer", StringSerializer.class.getName());
    p.put("linger.ms", "0");
    try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
      producer.partitionsFor(topic); // metadata before the first slot, not in it
      Thread.sleep(Math.max(0, startAt - System.currentTimeMillis()));
      long total = (long) rate * seconds;
      long start = System.currentTimeMillis();
      long sent = 0;
      while (sent < total) {
        long now = System.currentTimeMillis();
        long due = Math.min(total, (now - start) * rate / 1000 + 1);
        for (; sent < due; sent++) {
          long at = System.currentTimeMillis();
          String row = Rows.row(sent, total, at, at).replaceFirst("\"ts\":\\d+", "\"ts\":" + at);
          producer.send(new ProducerRecord<>(topic, null, at, Rows.key(sent), row));
        }
        Thread.sleep(Math.max(0, 10 - (System.currentTimeMillis() - now)));
      }
      producer.flush();
      System.out.println("{\"paced\":" + sent + ",\"seconds\":" + (System.currentTimeMillis() - start) / 1000.0 + "}");
    }
  }

  private static final Pattern SENT_AT = Pattern.compile("\"sentAt\":(\\d+)");

  /**
   * count TOPIC EXPECTED TIMEOUT_MS SETTLE_MS [LATENCY_FROM_MS]: reads TOPIC read_committed from
   * the beginning of every partition (no group), prints READY once positioned, DONE when it has
   * seen EXPECTED records (the harness starts the next run's counter meanwhile), then a JSON line
   * with the count, when the first and the EXPECTED-th record were seen (epoch ms), and the count
   * after SETTLE_MS more (a run that emits too much is wrong too). With LATENCY_FROM_MS, records
   * whose sentAt is at least that, and at least 1 s after the first output was seen, give
   * end-to-end latencies (receive time − sentAt).
   */
  static void count(String brokers, String topic, long expected, long timeoutMs, long settleMs, long latencyFrom) throws Exception {
    Properties p = new Properties();
    p.put("bootstrap.servers", brokers);
    p.put("key.deserializer", StringDeserializer.class.getName());
    p.put("value.deserializer", StringDeserializer.class.getName());
    p.put("isolation.level", "read_committed");
    p.put("enable.auto.commit", "false");
    p.put("max.poll.records", "5000");
    p.put("fetch.max.wait.ms", "50");
    try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(p)) {
      List<TopicPartition> parts = new ArrayList<>();
      consumer.partitionsFor(topic).forEach(i -> parts.add(new TopicPartition(topic, i.partition())));
      consumer.assign(parts);
      consumer.seekToBeginning(parts);
      for (TopicPartition tp : parts) consumer.position(tp);
      System.out.println("READY");
      System.out.flush();
      long deadline = System.currentTimeMillis() + timeoutMs;
      long count = 0, firstAt = 0, doneAt = 0, settleUntil = Long.MAX_VALUE;
      long[] lat = new long[1 << 16];
      int nlat = 0;
      while (System.currentTimeMillis() < Math.min(deadline, settleUntil)) {
        ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(100));
        long now = System.currentTimeMillis();
        if (!records.isEmpty() && firstAt == 0) firstAt = now;
        for (ConsumerRecord<String, String> r : records) {
          count++;
          if (latencyFrom > 0) {
            Matcher m = SENT_AT.matcher(r.value());
            if (m.find()) {
              long sent = Long.parseLong(m.group(1));
              // rows sent before the engine's first output came out wait out its start (JVM, group
              // join): only rows sent a second after that count, for every engine alike
              if (sent >= latencyFrom && firstAt > 0 && sent >= firstAt + 1000) {
                if (nlat == lat.length) lat = Arrays.copyOf(lat, lat.length * 2);
                lat[nlat++] = now - sent;
              }
            }
          }
        }
        if (doneAt == 0 && count >= expected) {
          doneAt = now;
          settleUntil = now + settleMs;
          System.out.println("DONE");
          System.out.flush();
        }
      }
      StringBuilder out = new StringBuilder("{\"count\":" + count + ",\"expected\":" + expected + ",\"firstAt\":" + firstAt + ",\"doneAt\":" + doneAt
          + ",\"timedOut\":" + (doneAt == 0));
      if (latencyFrom > 0 && nlat > 0) {
        long[] l = Arrays.copyOf(lat, nlat);
        Arrays.sort(l);
        out.append(",\"latencyN\":").append(nlat).append(",\"p50\":").append(l[(int) (nlat * 0.50)]).append(",\"p99\":").append(l[Math.min(nlat - 1, (int) (nlat * 0.99))]);
      }
      System.out.println(out.append("}"));
    }
  }

  /**
   * The key of partition p's closing row: one that the default partitioner puts on p, so that a
   * repartition on the record key (the hop workload's groupBy) still closes every partition's
   * windows in Kafka Streams, whose stream time is per partition.
   */
  static String closerKey(int p, int partitions) {
    for (int s = 0; ; s++) {
      String key = "closer-" + p + (s == 0 ? "" : "-" + s);
      if (Utils.toPositive(Utils.murmur2(key.getBytes(java.nio.charset.StandardCharsets.UTF_8))) % partitions == p) return key;
    }
  }
}
