/**
 * A small JSON value, parser and writer for AssemblyScript transforms (no dependency beyond the
 * AssemblyScript standard library). Enough for the batch ABI: objects keep their key order,
 * numbers are f64, strings are full Unicode (\uXXXX escapes and surrogate pairs included).
 */

export enum Kind {
  Null,
  Bool,
  Num,
  Str,
  Arr,
  Obj,
}

export class JValue {
  kind: Kind = Kind.Null;
  b: bool = false;
  n: f64 = 0;
  s: string = "";
  // Only lists and objects allocate these (most values are scalars).
  items: JValue[] | null = null;
  keys: string[] | null = null;
  values: JValue[] | null = null;

  static null(): JValue {
    return new JValue();
  }
  static bool(b: bool): JValue {
    const v = new JValue();
    v.kind = Kind.Bool;
    v.b = b;
    return v;
  }
  static num(n: f64): JValue {
    const v = new JValue();
    v.kind = Kind.Num;
    v.n = n;
    return v;
  }
  static str(s: string): JValue {
    const v = new JValue();
    v.kind = Kind.Str;
    v.s = s;
    return v;
  }
  static arr(): JValue {
    const v = new JValue();
    v.kind = Kind.Arr;
    v.items = [];
    return v;
  }
  static obj(): JValue {
    const v = new JValue();
    v.kind = Kind.Obj;
    v.keys = [];
    v.values = [];
    return v;
  }

  /** A list's items ([] for anything else). */
  list(): JValue[] {
    const items = this.items;
    return items === null ? [] : items;
  }

  /** The value of an object's key, or null (a JSON null value) when absent or not an object. */
  get(key: string): JValue {
    const keys = this.keys;
    if (keys === null) return JValue.null();
    for (let i = 0; i < keys.length; i++) if (keys[i] == key) return this.values![i];
    return JValue.null();
  }

  /** Sets an object's key, keeping the position of an existing key. */
  set(key: string, value: JValue): void {
    const keys = this.keys!;
    for (let i = 0; i < keys.length; i++) {
      if (keys[i] == key) {
        this.values![i] = value;
        return;
      }
    }
    keys.push(key);
    this.values!.push(value);
  }

  push(value: JValue): void {
    this.items!.push(value);
  }

  isNull(): bool {
    return this.kind == Kind.Null;
  }
  isNum(): bool {
    return this.kind == Kind.Num;
  }
  isStr(): bool {
    return this.kind == Kind.Str;
  }
  isBool(): bool {
    return this.kind == Kind.Bool;
  }

  /** A shallow copy of an object (keys and values lists copied, values shared). */
  copyObject(): JValue {
    const out = JValue.obj();
    const keys = this.keys;
    if (keys === null) return out;
    out.keys = keys.slice(0);
    out.values = this.values!.slice(0);
    return out;
  }
}

// ---- parsing ---------------------------------------------------------------------------------

class Parser {
  pos: i32 = 0;
  constructor(public text: string) {}

  fail(what: string): void {
    throw new Error("invalid JSON at " + this.pos.toString() + ": " + what);
  }

  skip(): void {
    const t = this.text;
    while (this.pos < t.length) {
      const c = t.charCodeAt(this.pos);
      if (c == 0x20 || c == 0x0a || c == 0x0d || c == 0x09) this.pos++;
      else break;
    }
  }

  value(): JValue {
    this.skip();
    if (this.pos >= this.text.length) this.fail("unexpected end");
    const c = this.text.charCodeAt(this.pos);
    if (c == 0x7b) return this.object();
    if (c == 0x5b) return this.array();
    if (c == 0x22) return JValue.str(this.string());
    if (c == 0x74) return this.literal("true", JValue.bool(true));
    if (c == 0x66) return this.literal("false", JValue.bool(false));
    if (c == 0x6e) return this.literal("null", JValue.null());
    return this.number();
  }

  literal(word: string, v: JValue): JValue {
    for (let i = 0; i < word.length; i++) {
      if (this.text.charCodeAt(this.pos + i) != word.charCodeAt(i)) this.fail("expected " + word);
    }
    this.pos += word.length;
    return v;
  }

  number(): JValue {
    const start = this.pos;
    const t = this.text;
    while (this.pos < t.length) {
      const c = t.charCodeAt(this.pos);
      if ((c >= 0x30 && c <= 0x39) || c == 0x2d || c == 0x2b || c == 0x2e || c == 0x65 || c == 0x45) this.pos++;
      else break;
    }
    if (this.pos == start) this.fail("unexpected character");
    return JValue.num(parseFloat(t.substring(start, this.pos)));
  }

  string(): string {
    const t = this.text;
    this.pos++; // opening quote
    // Fast path: no escape before the closing quote.
    let end = this.pos;
    while (end < t.length) {
      const c = t.charCodeAt(end);
      if (c == 0x22) {
        const s = t.substring(this.pos, end);
        this.pos = end + 1;
        return s;
      }
      if (c == 0x5c) break;
      end++;
    }
    let out = "";
    let runStart = this.pos;
    while (true) {
      if (this.pos >= t.length) this.fail("unterminated string");
      const c = t.charCodeAt(this.pos);
      if (c == 0x22) {
        out += t.substring(runStart, this.pos);
        this.pos++;
        return out;
      }
      if (c == 0x5c) {
        out += t.substring(runStart, this.pos);
        this.pos++;
        const e = t.charCodeAt(this.pos);
        this.pos++;
        if (e == 0x6e) out += "\n";
        else if (e == 0x74) out += "\t";
        else if (e == 0x72) out += "\r";
        else if (e == 0x62) out += "\b";
        else if (e == 0x66) out += "\f";
        else if (e == 0x75) {
          const code = I32.parseInt(t.substr(this.pos, 4), 16);
          out += String.fromCharCode(code);
          this.pos += 4;
        } else out += String.fromCharCode(e); // \" \\ \/
        runStart = this.pos;
        continue;
      }
      this.pos++;
    }
  }

  array(): JValue {
    const out = JValue.arr();
    this.pos++;
    this.skip();
    if (this.text.charCodeAt(this.pos) == 0x5d) {
      this.pos++;
      return out;
    }
    while (true) {
      out.push(this.value());
      this.skip();
      const c = this.text.charCodeAt(this.pos);
      this.pos++;
      if (c == 0x5d) return out;
      if (c != 0x2c) this.fail("expected , or ]");
    }
  }

  object(): JValue {
    const out = JValue.obj();
    this.pos++;
    this.skip();
    if (this.text.charCodeAt(this.pos) == 0x7d) {
      this.pos++;
      return out;
    }
    while (true) {
      this.skip();
      if (this.text.charCodeAt(this.pos) != 0x22) this.fail("expected a key");
      const key = this.string();
      this.skip();
      if (this.text.charCodeAt(this.pos) != 0x3a) this.fail("expected :");
      this.pos++;
      out.keys!.push(key);
      out.values!.push(this.value());
      this.skip();
      const c = this.text.charCodeAt(this.pos);
      this.pos++;
      if (c == 0x7d) return out;
      if (c != 0x2c) this.fail("expected , or }");
    }
  }
}

export function parse(text: string): JValue {
  const p = new Parser(text);
  const v = p.value();
  p.skip();
  if (p.pos != text.length) p.fail("trailing characters");
  return v;
}

// ---- writing ---------------------------------------------------------------------------------

function hex4(code: i32): string {
  const digits = "0123456789abcdef";
  let s = "\\u";
  for (let shift = 12; shift >= 0; shift -= 4) s += digits.charAt((code >> shift) & 0xf);
  return s;
}

/** Appends `s` as a JSON string to `out`. */
function writeQuoted(s: string, out: string[]): void {
  out.push('"');
  let runStart = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0x20 && c != 0x22 && c != 0x5c) continue;
    if (i > runStart) out.push(s.substring(runStart, i));
    if (c == 0x22) out.push('\\"');
    else if (c == 0x5c) out.push("\\\\");
    else if (c == 0x0a) out.push("\\n");
    else if (c == 0x0d) out.push("\\r");
    else if (c == 0x09) out.push("\\t");
    else out.push(hex4(c));
    runStart = i + 1;
  }
  out.push(runStart == 0 ? s : s.substring(runStart));
  out.push('"');
}

export function quote(s: string): string {
  const out = new Array<string>();
  writeQuoted(s, out);
  return out.join("");
}

export function formatNumber(n: f64): string {
  if (!isFinite(n)) return "null";
  if (n == Math.floor(n) && Math.abs(n) < 9007199254740992.0) return (<i64>n).toString();
  return n.toString();
}

/** Appends the JSON text of `v` to `out`, piece by piece (one join at the end, no nested copies). */
function write(v: JValue, out: string[]): void {
  switch (v.kind) {
    case Kind.Null:
      out.push("null");
      return;
    case Kind.Bool:
      out.push(v.b ? "true" : "false");
      return;
    case Kind.Num:
      out.push(formatNumber(v.n));
      return;
    case Kind.Str:
      writeQuoted(v.s, out);
      return;
    case Kind.Arr: {
      const items = v.items!;
      out.push("[");
      for (let i = 0; i < items.length; i++) {
        if (i > 0) out.push(",");
        write(items[i], out);
      }
      out.push("]");
      return;
    }
    default: {
      const keys = v.keys!;
      const values = v.values!;
      out.push("{");
      for (let i = 0; i < keys.length; i++) {
        if (i > 0) out.push(",");
        writeQuoted(keys[i], out);
        out.push(":");
        write(values[i], out);
      }
      out.push("}");
    }
  }
}

export function stringify(v: JValue): string {
  const out = new Array<string>();
  write(v, out);
  return out.join("");
}
