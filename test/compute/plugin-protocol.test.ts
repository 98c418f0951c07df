import { describe, expect, test } from "bun:test";
import { framedLine, readFramedLine } from "../../src/compute/plugin-protocol.ts";

describe("the plugin process's line framing", () => {
  test("a payload rides after the message and a tab, as it is, even with tabs of its own", () => {
    const payload = '{"rows":[{"note":"a\\tb","x":1}],\t"y": 2}';
    const line = framedLine({ type: "call", id: 7, fn: "transform" }, payload)!;
    expect(line).toBe(`{"type":"call","id":7,"fn":"transform"}\t${payload}`);
    expect(readFramedLine(line)).toEqual({ message: { type: "call", id: 7, fn: "transform" }, payload });
  });

  test("a tab inside the message's own strings is escaped, so the first raw tab is the frame's", () => {
    const line = framedLine({ type: "result", id: 1, note: "a\tb" }, "[1]")!;
    expect(readFramedLine(line)).toEqual({ message: { type: "result", id: 1, note: "a\tb" }, payload: "[1]" });
  });

  test("a payload with a line break cannot ride on a line; a plain JSON line has no payload", () => {
    expect(framedLine({ type: "result", id: 1 }, '{"results":\n[]}')).toBeUndefined();
    expect(framedLine({ type: "result", id: 1 }, '{"results":\r[]}')).toBeUndefined();
    expect(readFramedLine('{"type":"hello"}')).toEqual({ message: { type: "hello" } });
  });
});
