const N = 1_000_000;
const rows = []; for (let i = 0; i < N; i++) rows.push(JSON.parse(JSON.stringify({ key: `k${(i * 7919) % 10000}` })));
function t(name: string, fn: () => number) { const s = performance.now(); const x = fn(); console.log(name, (performance.now() - s).toFixed(0), "ms", x); }
for (let r = 0; r < 3; r++) {
  t("fresh get", () => { const m = new Map<unknown, number>(); for (let i = 0; i < 10000; i++) m.set(`k${i}`, i); let s = 0; for (let i = 0; i < N; i++) s += m.get(rows[i].key)!; return s; });
  t("fresh get nested", () => { const outer = new Map<number, Map<unknown, { n: number }>>(); const m = new Map<unknown, { n: number }>(); outer.set(1717000060000, m); for (let i = 0; i < 10000; i++) m.set(`k${i}`, { n: 0 }); let s = 0; for (let i = 0; i < N; i++) { const w = outer.get(1717000060000)!.get(rows[i].key)!; w.n++; } return s; });
}
