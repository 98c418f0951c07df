import * as v from "valibot";
const variant = process.argv[2] ?? "windowed-aggregate";
const mod = await import(`./src/ops/${variant}.ts`);
const { windowedAggregateSchema, compileWindowedAggregate } = mod;
const c = compileWindowedAggregate(v.parse(windowedAggregateSchema, { op: "windowedAggregate", timeColumn: "ts", windowMs: 60000, groupBy: ["key"], aggs: [{ op: "count" }, { op: "sum", column: "price" }, { op: "avg", column: "price" }] }), { stage: 0, step: 0, inputs: 1 });
const rows: any[] = [];
const rnd = () => Math.random(); const mode = process.argv[3] ?? "stride"; for (let i = 0; i < 1_000_000; i++) rows.push(JSON.parse(JSON.stringify({ key: mode === "stride" ? `k${(i * 7919) % 10000}` : `k${Math.floor(rnd() * 10000)}`, ts: 1717000000000 + Math.floor(i / 2) + (process.argv[4] === "ooo" ? Math.floor(rnd() * 1000) : 0), price: i % 100 })));
const times = [];
for (let r = 0; r < 9; r++) {
  const op = c.create();
  let t = performance.now();
  for (let i = 0; i < rows.length; i++) { const row = rows[i]; op.process(row, row.ts, 0); if ((i + 1) % 500 === 0) op.advance(row.ts - 5000); }
  times.push(performance.now() - t);
}
times.sort((a, b) => a - b);
console.log(variant, "min", times[0].toFixed(0), "median", times[4].toFixed(0));
