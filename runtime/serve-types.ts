/** What serving a fetch handler takes and gives, shared by runtime/serve.ts and its per-runtime adapters. */

/** Anything with a Web-standard fetch handler: a Hono app qualifies. */
export interface FetchApp {
  fetch(request: Request): Response | Promise<Response>;
}

export interface ServeOptions {
  hostname: string;
  /** 0 picks a free port; the served port is in the result. */
  port: number;
}

export interface Served {
  /** The port actually listened on. */
  port: number;
  /** Stops listening and closes open connections; resolves once the socket is released. */
  close(): Promise<void>;
}

export type ServeAdmin = (app: FetchApp, options: ServeOptions) => Promise<Served>;
