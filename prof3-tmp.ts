class A { readonly #dirty = new Map<string, object | null>(); touched(e: { key: string }) { this.#dirty.set(e.key, e); } }
class B { readonly dirty = new Map<string, object | null>(); touched(e: { key: string }) { this.dirty.set(e.key, e); } }
const N = 1_000_000;
const ents = Array.from({ length: 10000 }, (_, i) => ({ key: `w:${1717000000000}:${JSON.stringify("k" + i)}`, seq: i }));
function t(name: string, fn: () => number) { const s = performance.now(); const x = fn(); console.log(name, (performance.now() - s).toFixed(0), "ms", x); }
for (let r = 0; r < 3; r++) {
  t("private", () => { const a = new A(); for (let i = 0; i < N; i++) a.touched(ents[i % 10000]!); return 0; });
  t("public", () => { const a = new B(); for (let i = 0; i < N; i++) a.touched(ents[i % 10000]!); return 0; });
  t("private w/ null", () => { const a = new A(); for (let i = 0; i < N; i++) { a.touched(ents[i % 10000]!); } return 0; });
}
