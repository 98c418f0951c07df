/**
 * The admin server's address (STREAM_ADMIN_ADDR) and the loopback test `/stop` relies on.
 */
import { FvError } from "../../src/index.ts";

/** The default: this machine only, on a fixed port so `http://127.0.0.1:8686/` is easy to find. */
export const DEFAULT_ADMIN_ADDRESS = "127.0.0.1:8686";

export interface AdminAddress {
  hostname: string;
  port: number;
}

/**
 * Reads `host:port`, `[ipv6]:port` or `:port` (all interfaces). `off` turns the admin server
 * off (returns undefined). Anything else is an INVALID_SETTINGS error naming the variable.
 *
 * @example
 * parseAdminAddress("0.0.0.0:8686"); // { hostname: "0.0.0.0", port: 8686 }
 * parseAdminAddress("[::1]:0");      // { hostname: "::1", port: 0 } (0: any free port)
 */
export function parseAdminAddress(text: string | undefined, name = "STREAM_ADMIN_ADDR"): AdminAddress | undefined {
  const value = (text ?? "").trim() || DEFAULT_ADMIN_ADDRESS;
  if (value === "off") return undefined;
  const match = /^(?:\[([0-9a-fA-F:.]+)\]|([^\s:[\]]*)):(\d{1,5})$/.exec(value);
  const port = match ? Number(match[3]) : NaN;
  if (!match || port > 65535) {
    throw new FvError(
      "INVALID_SETTINGS",
      `invalid setting ${name}=${JSON.stringify(value)}: use host:port (e.g. 127.0.0.1:8686, 0.0.0.0:8686, [::1]:8686; port 0 picks a free one) or off`,
      { context: { field: name } },
    );
  }
  return { hostname: match[1] ?? (match[2] || "0.0.0.0"), port };
}

/** The host part of `host`, `host:port`, `[v6]` or `[v6]:port`. */
export function hostOf(address: string): string {
  const value = address.trim();
  const bracketed = /^\[([^\]]+)\](?::\d+)?$/.exec(value);
  if (bracketed) return bracketed[1]!;
  // A bare IPv6 address has more than one colon and no port.
  if ((value.match(/:/g) ?? []).length > 1) return value;
  return value.replace(/:\d*$/, "");
}

/** True for localhost, 127.0.0.0/8 and ::1 (also as IPv4-mapped ::ffff:127.x.y.z), with or without a port. */
export function isLoopback(address: string): boolean {
  const host = hostOf(address).toLowerCase().replace(/\.$/, "");
  if (host === "localhost" || host.endsWith(".localhost")) return true;
  if (host === "::1" || host === "0:0:0:0:0:0:0:1") return true;
  const v4 = /^(?:::ffff:)?127\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(host);
  return v4 !== null && v4.slice(1).every((octet) => Number(octet) <= 255);
}
