package dev.fvstreams.bench;

import java.util.Arrays;

/**
 * One entry for everything Java in `npm run bench:peers`:
 *
 *   streams WORKLOAD alos|eos INPUT OUTPUT APP_ID   the Kafka Streams peer (runs until SIGTERM)
 *   create NAME:PARTITIONS ...                       topics (existing ones are kept)
 *   delete-prefix PREFIX ...                         drop the benchmark's topics afterwards
 *   load TOPIC N T0                                  the input rows and closers; prints expected counts
 *   pace TOPIC RATE SECONDS [START_AT_MS]            rows at a fixed rate with their send time
 *   count TOPIC EXPECTED TIMEOUT_MS SETTLE_MS [LATENCY_FROM_MS]   the read_committed output counter
 *
 * The brokers come from STREAM_BROKERS (default 127.0.0.1:9092), as for fv-streams.
 */
public final class Main {
  private Main() {}

  public static void main(String[] args) throws Exception {
    String brokers = System.getenv().getOrDefault("STREAM_BROKERS", "127.0.0.1:9092");
    String[] rest = Arrays.copyOfRange(args, 1, args.length);
    switch (args[0]) {
      case "streams" -> StreamsPeer.run(brokers, rest[0], rest[1], rest[2], rest[3], rest[4]);
      case "create" -> Harness.create(brokers, Arrays.asList(rest));
      case "delete-prefix" -> Harness.deletePrefix(brokers, Arrays.asList(rest));
      case "load" -> Harness.load(brokers, rest[0], Long.parseLong(rest[1]), Long.parseLong(rest[2]));
      case "expected" -> Harness.expected(Long.parseLong(rest[0]), Long.parseLong(rest[1]), Integer.parseInt(rest[2]));
      case "pace" -> Harness.pace(brokers, rest[0], Integer.parseInt(rest[1]), Integer.parseInt(rest[2]), rest.length > 3 ? Long.parseLong(rest[3]) : 0);
      case "count" -> Harness.count(brokers, rest[0], Long.parseLong(rest[1]), Long.parseLong(rest[2]), Long.parseLong(rest[3]),
          rest.length > 4 ? Long.parseLong(rest[4]) : 0);
      default -> throw new IllegalArgumentException("unknown command " + args[0]);
    }
  }
}
