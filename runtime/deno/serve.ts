/** Serves a fetch handler with Deno.serve. Deno only: import it through runtime/serve.ts. */
import type { FetchApp, ServeOptions, Served } from "../serve-types.ts";

/** The part of Deno's API used here (the project type-checks against Bun's types). */
declare const Deno: {
  serve(
    options: { hostname?: string; port?: number; onListen?: (addr: { hostname: string; port: number }) => void },
    handler: (request: Request) => Response | Promise<Response>,
  ): { addr: { port: number }; shutdown(): Promise<void> };
};

export function serveAdmin(app: FetchApp, options: ServeOptions): Promise<Served> {
  return new Promise((resolve, reject) => {
    try {
      // onListen replaces Deno's own "Listening on …" line: the caller logs the address.
      const server = Deno.serve(
        { hostname: options.hostname, port: options.port, onListen: () => {} },
        (request) => app.fetch(request),
      );
      let closed: Promise<void> | undefined;
      resolve({ port: server.addr.port, close: () => (closed ??= server.shutdown()) });
    } catch (error) {
      reject(error);
    }
  });
}
