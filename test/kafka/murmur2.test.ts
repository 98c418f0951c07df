import { describe, expect, test } from "bun:test";
import { murmur2, partitionOfKey } from "../../src/kafka/murmur2.ts";

const bytes = (s: string) => new TextEncoder().encode(s);

describe("Kafka's default partitioner", () => {
  // Printed by the Java client's Utils.murmur2 and Utils.toPositive(...) % 4 for these keys
  // (kafka-clients 4.4.0 on this machine): every tail length (0-3 bytes past a whole word).
  const java: Array<[string, number, number]> = [
    ["", 275646681, 1],
    ["21", -973932308, 0],
    ["abc", 479470107, 3],
    ["foobar", -790332482, 2],
    ["k1", 1684045097, 1],
    ["cust-42", 1534714832, 0],
    ["a-little-bit-long-string", -985981536, 0],
    ["a-little-bit-longer-string", -1486304829, 3],
    ["lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971, 1],
  ];

  test.each(java)("murmur2(%p) is Java's %p, and its partition of 4 is %p", (key, hash, partition) => {
    expect(murmur2(bytes(key))).toBe(hash);
    expect(partitionOfKey(bytes(key), 4)).toBe(partition);
  });

  test("a negative hash is made positive by dropping the sign bit (Java's toPositive), not by reading it unsigned", () => {
    // "21" hashes to -973932308: & 0x7fffffff gives 1173551340, read unsigned (>>> 0) 3321034988.
    // Of 3 partitions the two disagree: 1173551340 % 3 = 0, 3321034988 % 3 = 2.
    expect(partitionOfKey(bytes("21"), 3)).toBe(0);
    expect((murmur2(bytes("21")) >>> 0) % 3).toBe(2);
  });
});

test("a string key hashes as its UTF-8 bytes (the producers hand keys over as strings), long keys and multi-byte characters included", () => {
  for (const key of ["", "21", "kü-42", "😀 € ü", "x".repeat(1000), "ü".repeat(300)]) {
    expect(murmur2(key)).toBe(murmur2(new TextEncoder().encode(key)));
    expect(partitionOfKey(key, 7)).toBe(partitionOfKey(new TextEncoder().encode(key), 7));
  }
});
