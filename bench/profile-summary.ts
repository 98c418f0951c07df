/**
 * The summary of a V8 .cpuprofile (written by `bun --cpu-prof`, or by bench/peers/profile.ts
 * for Deno): self time per place (our code by folder, the Kafka client, the runtime) and the top
 * self-time functions, as Markdown tables.
 *
 *   bun bench/profile-summary.ts FILE.cpuprofile [top=20]
 */
import { readFileSync } from "node:fs";
import { resolve } from "node:path";

const ROOT = resolve(import.meta.dirname, "..");

interface Profile {
  nodes: Array<{ id: number; callFrame: { functionName: string; url: string; lineNumber: number } }>;
  samples: number[];
  timeDeltas: number[];
}

export function summarize(file: string, top = 20): string {
  const prof = JSON.parse(readFileSync(file, "utf8")) as Profile;
  const byId = new Map(prof.nodes.map((n) => [n.id, n]));
  const self = new Map<string, number>();
  const place = new Map<string, number>();
  let total = 0;
  prof.samples.forEach((sid, i) => {
    const n = byId.get(sid)!;
    const dt = prof.timeDeltas[i] ?? 0;
    total += dt;
    const url = n.callFrame.url.replace(/^file:\/\//, "").replace(ROOT + "/", "");
    const fn = `${n.callFrame.functionName || "(anonymous)"} ${url ? `${url}:${n.callFrame.lineNumber + 1}` : ""}`.trim();
    self.set(fn, (self.get(fn) ?? 0) + dt);
    const where = n.callFrame.functionName === "(idle)" ? "(idle)"
      : n.callFrame.functionName === "(garbage collector)" ? "(garbage collector)"
      : url.includes("@platformatic/kafka") ? "@platformatic/kafka"
      : url.startsWith("src/") ? url.split("/").slice(0, 2).join("/")
      : url.startsWith("runtime/") ? "runtime/"
      : url.includes("node_modules/") ? url.split("node_modules/")[1]!.split("/").slice(0, 2).join("/")
      : url || "(runtime natives, program)";
    place.set(where, (place.get(where) ?? 0) + dt);
  });
  const busy = total - (place.get("(idle)") ?? 0);
  const pct = (v: number) => `${((100 * v) / total).toFixed(1)}%`;
  const lines = [`profile ${file}: ${(total / 1e6).toFixed(1)} s sampled, ${(busy / 1e6).toFixed(1)} s not idle`];
  lines.push("", "| self time by place | s | share of samples |", "|---|--:|--:|");
  for (const [k, v] of [...place].sort((a, b) => b[1] - a[1]).slice(0, 12)) lines.push(`| ${k} | ${(v / 1e6).toFixed(2)} | ${pct(v)} |`);
  lines.push("", "| top self-time functions | s | share of samples |", "|---|--:|--:|");
  for (const [k, v] of [...self].sort((a, b) => b[1] - a[1]).slice(0, top)) lines.push(`| \`${k}\` | ${(v / 1e6).toFixed(2)} | ${pct(v)} |`);
  return lines.join("\n");
}

if (import.meta.main) console.log(summarize(process.argv[2]!, Number(process.argv[3] ?? 20)));
