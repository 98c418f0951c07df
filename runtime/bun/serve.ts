/** Serves a fetch handler with Bun.serve. Bun only: import it through runtime/serve.ts. */
import type { FetchApp, ServeOptions, Served } from "../serve-types.ts";

export function serveAdmin(app: FetchApp, options: ServeOptions): Promise<Served> {
  const server = Bun.serve({ hostname: options.hostname, port: options.port, fetch: (request) => app.fetch(request) });
  let closed: Promise<void> | undefined;
  return Promise.resolve({
    port: server.port ?? options.port,
    // true: drop keep-alive connections too, or a polling dashboard holds the port open.
    close: () => (closed ??= Promise.resolve(server.stop(true)).then(() => {})),
  });
}
