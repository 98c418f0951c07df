/**
 * Serves a fetch handler (the admin app, the reference platform) on whichever runtime this is:
 * Bun.serve on Bun, Deno.serve on Deno, @hono/node-server on Node. Each adapter is imported
 * only on its own runtime, so none of them loads another runtime's globals.
 *
 * @example
 * const server = await serveAdmin(createAdminApp(options), { hostname: "127.0.0.1", port: 8686 });
 * log("info", `admin on http://127.0.0.1:${server.port}/`);
 * await server.close();
 */
import type { FetchApp, ServeAdmin, ServeOptions, Served } from "./serve-types.ts";

export type { FetchApp, ServeAdmin, ServeOptions, Served } from "./serve-types.ts";

/** Which runtime runs this code. */
export function currentRuntime(): "bun" | "deno" | "node" {
  const g = globalThis as { Bun?: unknown; Deno?: unknown };
  if (typeof g.Bun !== "undefined") return "bun";
  if (typeof g.Deno !== "undefined") return "deno";
  return "node";
}

export async function serveAdmin(app: FetchApp, options: ServeOptions): Promise<Served> {
  const runtime = currentRuntime();
  const adapter: { serveAdmin: ServeAdmin } =
    runtime === "bun" ? await import("./bun/serve.ts") : runtime === "deno" ? await import("./deno/serve.ts") : await import("./node/serve.ts");
  return adapter.serveAdmin(app, options);
}
