/** Serves a fetch handler on Node with @hono/node-server. */
import { serve } from "@hono/node-server";
import type { FetchApp, ServeOptions, Served } from "../serve-types.ts";

export function serveAdmin(app: FetchApp, options: ServeOptions): Promise<Served> {
  return new Promise((resolve, reject) => {
    const server = serve(
      // false: keep Node's own Request/Response globals; the admin traffic does not need the speed-up.
      { fetch: (request) => app.fetch(request), hostname: options.hostname, port: options.port, overrideGlobalObjects: false },
      (info) => {
        server.off("error", reject);
        let closed: Promise<void> | undefined;
        const close = () =>
          (closed ??= new Promise<void>((done, fail) => {
            server.close((error) => (error ? fail(error) : done()));
            // Keep-alive connections (a polling dashboard) would hold close() open.
            if ("closeAllConnections" in server) server.closeAllConnections();
          }));
        resolve({ port: info.port, close });
      },
    );
    server.once("error", reject);
  });
}
