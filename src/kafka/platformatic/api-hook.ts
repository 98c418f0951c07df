/**
 * The one hook into @platformatic/kafka's internals: its clients look up each protocol API
 * (Fetch, Produce, TxnOffsetCommit, ...) through a method kept behind a symbol. Wrapping that
 * lookup changes how one request is built or read, while the library keeps its connections,
 * retries and metadata. A library version without the lookup is refused loudly.
 */

/** A symbol of an object or its prototypes, by its description (the library keeps its hooks behind symbols). */
export function findSymbol(object: object, description: string): symbol | undefined {
  for (let o: object | null = object; o; o = Object.getPrototypeOf(o)) {
    const found = Object.getOwnPropertySymbols(o).find((s) => s.description === description);
    if (found) return found;
  }
  return undefined;
}

// deno-lint-ignore no-explicit-any
type Api = any;

/**
 * From now on, `client` calls `wrap(api)` where it called the protocol API `name`. `why` names
 * the code that depends on it, for the error when the library changed. The wrapper keeps the
 * API's `key` and `version` (the library reads them: a Fetch's version picks how it names
 * topics), and an API this hook made is not wrapped again (the library's first lookup of a
 * client goes through the lookup twice).
 */
// deno-lint-ignore no-explicit-any
export function wrapApi(client: any, name: string, wrap: (api: Api) => Api, why: string): void {
  const kGetApi = findSymbol(client, "plt.kafka.base.getApi");
  if (!kGetApi) throw new Error(`@platformatic/kafka changed: its protocol-API lookup (plt.kafka.base.getApi) is gone; ${why} needs a new hook`);
  const getApi = client[kGetApi].bind(client);
  const made = new WeakSet<object>();
  client[kGetApi] = (apiName: string, callback: (error: unknown, api?: Api) => void) =>
    getApi(apiName, (error: unknown, api: Api) => {
      if (error || apiName !== name || typeof api !== "function" || made.has(api)) return callback(error, api);
      const wrapped = wrap(api);
      if (wrapped !== api && typeof wrapped === "function") {
        wrapped.key = api.key;
        wrapped.version = api.version;
        made.add(wrapped);
      }
      callback(null, wrapped);
    });
}
