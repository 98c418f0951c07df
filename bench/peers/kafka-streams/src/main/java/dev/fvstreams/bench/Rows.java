package dev.fvstreams.bench;

/**
 * The benchmark's input rows: about 200 bytes of JSON each, keyed by customer (10k keys), event
 * time spread evenly over SPAN_MS from t0 so that a 1-minute tumbling window sees every key.
 * Everything an engine must output is computable from (n, t0), so a run can be checked.
 */
final class Rows {
  static final int KEYS = 10_000;
  static final long WINDOW_MS = 60_000;
  static final long SPAN_MS = 10 * WINDOW_MS;
  /** Stateless filter: price >= 50 keeps about 3/4 of the rows. */
  static final double MIN_PRICE = 50;
  private static final String[] SIDES = {"buy", "sell"};
  private static final String NOTE = "n".repeat(24);

  private Rows() {}

  static String key(long i) {
    return String.format("c%05d", i % KEYS);
  }

  static long ts(long i, long n, long t0) {
    return t0 + (i * SPAN_MS) / n;
  }

  static double price(long i) {
    return ((i * 7919) % 20_000) / 100.0;
  }

  static long qty(long i) {
    return 1 + (i % 9);
  }

  static String row(long i, long n, long t0, long sentAt) {
    return "{\"id\":" + i + ",\"cust\":\"" + key(i) + "\",\"sku\":\"SKU-" + (i % 997) + "\",\"customer\":\"customer-" + (i % KEYS)
        + "\",\"price\":" + price(i) + ",\"qty\":" + qty(i) + ",\"side\":\"" + SIDES[(int) (i % 2)]
        + "\",\"venue\":\"XNAS\",\"ts\":" + ts(i, n, t0) + ",\"sentAt\":" + sentAt + ",\"note\":\"" + NOTE + "\"}";
  }

  /** One closing row per partition: its event time closes every window of the data rows. */
  static String closer(int partition, long t0) {
    return "{\"id\":-1,\"cust\":\"closer-" + partition + "\",\"sku\":\"SKU-0\",\"customer\":\"closer\",\"price\":0,\"qty\":0,\"side\":\"buy\",\"venue\":\"XNAS\",\"ts\":"
        + closerTs(t0) + ",\"sentAt\":0,\"note\":\"\"}";
  }

  static long closerTs(long t0) {
    return t0 + SPAN_MS + WINDOW_MS;
  }

  /** Outputs each workload must produce for n data rows and `partitions` closing rows. */
  static String expectedJson(long n, long t0, int partitions) {
    long stateless = 0;
    for (long i = 0; i < n; i++) if (price(i) >= MIN_PRICE) stateless++;
    // closers have price 0: filtered out. Compute maps every row, closers included.
    long compute = n + partitions;
    // stateful: one output per (key, window) of the data rows; closers' windows never close.
    long windows = SPAN_MS / WINDOW_MS + 1;
    java.util.BitSet seen = new java.util.BitSet((int) (KEYS * windows));
    for (long i = 0; i < n; i++) {
      long w = (ts(i, n, t0) - t0) / WINDOW_MS;
      seen.set((int) ((i % KEYS) * windows + w));
    }
    long stateful = seen.cardinality();
    return "{\"stateless\":" + stateless + ",\"stateful\":" + stateful + ",\"hop\":" + stateful + ",\"compute\":" + compute + "}";
  }
}
