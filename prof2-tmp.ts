const N = 1_000_000;
const keys: string[] = []; for (let i = 0; i < 10000; i++) keys.push(`k${i}`);
function t(name: string, fn: () => number) { const s = performance.now(); const x = fn(); console.log(name, (performance.now() - s).toFixed(0), "ms", x); }
for (let r = 0; r < 2; r++) {
t("double-key map get", () => { const m = new Map<number, number>(); m.set(1717000020000, 1); let s = 0; for (let i = 0; i < N; i++) s += m.get(1717000020000 + (i & 0))!; return s; });
t("stringify+get", () => { const m = new Map<string, number>(); for (const k of keys) m.set(JSON.stringify(k), 1); let s = 0; for (let i = 0; i < N; i++) s += m.get(JSON.stringify(keys[i % 10000]))!; return s; });
t("rope key set", () => { const m = new Map<string, number>(); const objs = keys.map((k) => ({ key: `w:${1717000000000}:${JSON.stringify(k)}` })); let s = 0; for (let i = 0; i < N; i++) { m.set(objs[i % 10000]!.key, i); } return m.size; });
t("flat key set", () => { const m = new Map<string, number>(); const objs = keys.map((k) => ({ key: ("w:" + 1717000000000 + ":" + JSON.stringify(k)).split("").join("") })); let s = 0; for (let i = 0; i < N; i++) { m.set(objs[i % 10000]!.key, i); } return m.size; });
t("obj key set", () => { const m = new Map<object, number>(); const objs = keys.map((k) => ({ key: k })); for (let i = 0; i < N; i++) { m.set(objs[i % 10000]!, i); } return m.size; });
}
