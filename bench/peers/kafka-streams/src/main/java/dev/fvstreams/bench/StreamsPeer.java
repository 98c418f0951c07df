package dev.fvstreams.bench;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.TimeWindows;

/**
 * The Kafka Streams peer: the same three topologies as the fv-streams pipelines in bench/peers/.
 *
 * - stateless: parse, keep price >= 50, add notional = price * qty, serialize;
 * - stateful: per key (the record key, the customer), a 1-minute tumbling window with no grace,
 *   count and sum of qty, final results only (suppress until the window closes), as fv-streams'
 *   windowedAggregate fires once per (key, window) when the watermark passes the window's end;
 * - hop: the stateful topology through a repartition topic: groupBy on the same key (Kafka
 *   Streams repartitions at every groupBy, whatever the key), as fv-streams' windowedAggregate
 *   with repartition = true;
 * - compute: the map of functions/enrich-order (notional, tier, label) written in Java.
 *
 * Settings that matter, equal for both engines: one stream thread, commit every
 * BENCH_COMMIT_MS (default 1000) in both guarantees, offsets from the earliest.
 */
final class StreamsPeer {
  private static final ObjectMapper JSON = new ObjectMapper();

  private StreamsPeer() {}

  static void run(String brokers, String workload, String guarantee, String input, String output, String appId) throws Exception {
    Properties p = new Properties();
    p.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
    p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
    p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee.equals("eos") ? StreamsConfig.EXACTLY_ONCE_V2 : StreamsConfig.AT_LEAST_ONCE);
    p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, System.getenv().getOrDefault("BENCH_COMMIT_MS", "1000"));
    p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
    p.put(StreamsConfig.STATE_DIR_CONFIG, System.getProperty("java.io.tmpdir") + "/fv-bench-kstreams");
    p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
    p.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
    p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
    p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);

    StreamsBuilder builder = new StreamsBuilder();
    KStream<String, String> in = builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()));
    switch (workload) {
      case "stateless" -> in.mapValues(StreamsPeer::parse)
          .filter((k, row) -> row.path("price").asDouble() >= Rows.MIN_PRICE)
          .mapValues(row -> write(row.put("notional", row.path("price").asDouble() * row.path("qty").asDouble())))
          .to(output, Produced.with(Serdes.String(), Serdes.String()));
      case "compute" -> in.mapValues(v -> write(enrich(parse(v)))).to(output, Produced.with(Serdes.String(), Serdes.String()));
      case "stateful", "hop" -> (workload.equals("hop")
              ? in.groupBy((k, v) -> k, Grouped.with(Serdes.String(), Serdes.String()))
              : in.groupByKey(Grouped.with(Serdes.String(), Serdes.String())))
          .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofMillis(Rows.WINDOW_MS), Duration.ZERO))
          // the aggregate is "count,sum" as text, so no custom serde is needed
          .aggregate(() -> "0,0", (k, v, agg) -> {
            int comma = agg.indexOf(',');
            long count = Long.parseLong(agg.substring(0, comma)) + 1;
            double sum = Double.parseDouble(agg.substring(comma + 1)) + parse(v).path("qty").asDouble();
            return count + "," + sum;
          }, Materialized.with(Serdes.String(), Serdes.String()))
          .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()))
          .toStream()
          .map((w, agg) -> {
            int comma = agg.indexOf(',');
            ObjectNode out = JSON.createObjectNode();
            out.put("windowStart", w.window().start());
            out.put("windowEnd", w.window().end());
            out.put("cust", w.key());
            out.put("count", Long.parseLong(agg.substring(0, comma)));
            out.put("sum_qty", Double.parseDouble(agg.substring(comma + 1)));
            return KeyValue.pair(w.key(), write(out));
          })
          .to(output, Produced.with(Serdes.String(), Serdes.String()));
      default -> throw new IllegalArgumentException("unknown workload " + workload);
    }

    KafkaStreams streams = new KafkaStreams(builder.build(), p);
    CountDownLatch stopped = new CountDownLatch(1);
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      streams.close(Duration.ofSeconds(10));
      stopped.countDown();
    }));
    streams.cleanUp();
    streams.start();
    stopped.await();
  }

  /**
   * functions/enrich-order in Java. Like the WASM step, whose manifest declares its input and
   * output columns, the output row holds exactly sku, customer, price, qty, notional, tier
   * ("large" from 1000 on) and label ("SKU ×qty"); other input columns are left out.
   */
  static ObjectNode enrich(ObjectNode row) {
    ObjectNode out = JSON.createObjectNode();
    JsonNode price = row.get("price"), qty = row.get("qty"), sku = row.get("sku"), customer = row.get("customer");
    out.set("sku", sku != null && sku.isTextual() ? sku : out.nullNode());
    out.set("customer", customer != null && customer.isTextual() ? customer : out.nullNode());
    out.set("price", price != null && price.isNumber() ? price : out.nullNode());
    out.set("qty", qty != null && qty.isNumber() ? qty : out.nullNode());
    if (price != null && price.isNumber() && qty != null && qty.isNumber()) {
      double notional = price.asDouble() * qty.asDouble();
      out.put("notional", notional);
      out.put("tier", notional >= 1000 ? "large" : "small");
    } else {
      out.putNull("notional");
      out.putNull("tier");
    }
    String q = qty != null && qty.isNumber() ? (qty.asDouble() == Math.rint(qty.asDouble()) ? Long.toString(qty.asLong()) : qty.asText()) : "?";
    out.put("label", (sku != null && sku.isTextual() ? sku.asText() : "?") + " \u00d7" + q);
    return out;
  }

  static ObjectNode parse(String v) {
    try {
      return (ObjectNode) JSON.readTree(v);
    } catch (Exception e) {
      throw new RuntimeException(e);
    }
  }

  static String write(JsonNode v) {
    try {
      return JSON.writeValueAsString(v);
    } catch (Exception e) {
      throw new RuntimeException(e);
    }
  }
}
