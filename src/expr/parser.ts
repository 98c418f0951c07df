/**
 * A recursive-descent (precedence-climbing) parser from tokens to the syntax tree.
 *
 * Grammar, lowest precedence first:
 *
 *   expression := or ( "?" expression ":" expression )?        right-associative
 *   or .. mul  := operand ( binaryOperator operand )*           see `binaryPrecedence`
 *   unary      := ( "-" | "!" ) unary | postfix
 *   postfix    := primary ( "." name | "[" expression "]" )*
 *   primary    := number | string | true | false | null | column | `quoted column`
 *               | name "(" arguments? ")" | "[" items? "]" | "(" expression ")"
 */
import { binaryPrecedence, type BinaryOperator, type Node } from "./ast.ts";
import { ExpressionCompileError } from "./expression-errors.ts";
import { tokenize, type Token } from "./lexer.ts";

/**
 * How deep a tree may nest. Evaluation recurses once per level, so this bounds the stack an
 * expression can use; real filters nest a handful of levels.
 */
export const MAX_DEPTH = 200;

export function parse(source: string): Node {
  return new Parser(source).parseAll();
}

class Parser {
  readonly #source: string;
  readonly #tokens: Token[];
  #at = 0;
  #depth = 0;

  constructor(source: string) {
    this.#source = source;
    this.#tokens = tokenize(source);
  }

  parseAll(): Node {
    if (this.#peek().kind === "end") this.#fail("the expression is empty", this.#peek());
    const node = this.#expression();
    const next = this.#peek();
    if (next.kind !== "end") this.#fail(this.#unexpected(next), next);
    return node;
  }

  #peek(): Token {
    return this.#tokens[this.#at]!;
  }

  #next(): Token {
    const token = this.#tokens[this.#at]!;
    if (token.kind !== "end") this.#at++;
    return token;
  }

  #isPunct(text: string): boolean {
    const t = this.#peek();
    return t.kind === "punctuation" && t.text === text;
  }

  #expect(text: string, context: string): Token {
    const t = this.#peek();
    if (t.kind === "punctuation" && t.text === text) return this.#next();
    return this.#fail(`${this.#unexpected(t)}, expected '${text}' ${context}`, t);
  }

  #unexpected(t: Token): string {
    switch (t.kind) {
      case "end":
        return "unexpected end of expression";
      case "string":
        return `unexpected string ${JSON.stringify(t.text)}`;
      default:
        return `unexpected '${this.#source.slice(t.pos, t.pos + Math.max(t.text.length, 1))}'`;
    }
  }

  #fail(detail: string, at: Token | number): never {
    throw new ExpressionCompileError("syntax", detail, this.#source, typeof at === "number" ? at : at.pos);
  }

  /** Guards every recursive step, so hostile input fails cleanly instead of overflowing. */
  #enter(at: Token): void {
    if (++this.#depth > MAX_DEPTH) this.#fail(`the expression nests deeper than ${MAX_DEPTH} levels`, at);
  }

  #leave(): void {
    this.#depth--;
  }

  #expression(): Node {
    this.#enter(this.#peek());
    const test = this.#binary(1);
    let node = test;
    if (this.#isPunct("?")) {
      const q = this.#next();
      const then = this.#expression();
      this.#expect(":", "after the true branch of '?'");
      const otherwise = this.#expression();
      node = { kind: "ternary", pos: q.pos, test, then, otherwise };
    }
    this.#leave();
    return node;
  }

  #binary(minPrecedence: number): Node {
    let left = this.#unary();
    let chained = 0;
    for (;;) {
      const t = this.#peek();
      const isOp = (t.kind === "punctuation" || (t.kind === "keyword" && t.text === "in")) && t.text in binaryPrecedence;
      if (!isOp) return this.#unwind(left, chained);
      const op = t.text as BinaryOperator;
      const precedence = binaryPrecedence[op];
      if (precedence < minPrecedence) return this.#unwind(left, chained);
      this.#next();
      const right = this.#binary(precedence + 1);
      left = { kind: "binary", pos: t.pos, op, left, right };
      // A left-associative chain deepens the tree without recursing here; count it too.
      chained++;
      this.#enter(t);
    }
  }

  #unwind(node: Node, chained: number): Node {
    this.#depth -= chained;
    return node;
  }

  #unary(): Node {
    const t = this.#peek();
    if (t.kind === "punctuation" && (t.text === "-" || t.text === "!")) {
      this.#next();
      this.#enter(t);
      const operand = this.#unary();
      this.#leave();
      return { kind: "unary", pos: t.pos, op: t.text, operand };
    }
    return this.#postfix(this.#primary());
  }

  #postfix(node: Node): Node {
    let chained = 0;
    for (;;) {
      const t = this.#peek();
      if (t.kind !== "punctuation") break;
      if (t.text === ".") {
        this.#next();
        const name = this.#next();
        if (name.kind !== "identifier" && name.kind !== "keyword") {
          this.#fail(`${this.#unexpected(name)}, expected a field name after '.'`, name);
        }
        if (this.#isPunct("(")) {
          this.#fail(`'${name.text}' is not a method: call functions as ${name.text}(value, ...)`, name);
        }
        node = { kind: "member", pos: name.pos, object: node, name: name.text };
      } else if (t.text === "[") {
        this.#next();
        const index = this.#expression();
        this.#expect("]", "to close the index");
        node = { kind: "index", pos: t.pos, object: node, index };
      } else {
        break;
      }
      chained++;
      this.#enter(t);
    }
    this.#depth -= chained;
    return node;
  }

  #primary(): Node {
    const t = this.#next();
    switch (t.kind) {
      case "number":
        return { kind: "literal", pos: t.pos, value: t.number };
      case "string":
        return { kind: "literal", pos: t.pos, value: t.text };
      case "keyword":
        if (t.text === "true") return { kind: "literal", pos: t.pos, value: true };
        if (t.text === "false") return { kind: "literal", pos: t.pos, value: false };
        if (t.text === "null") return { kind: "literal", pos: t.pos, value: null };
        return this.#fail(this.#unexpected(t), t);
      case "identifier": {
        const quoted = this.#source[t.pos] === "`";
        if (quoted && t.text === "") this.#fail("a quoted column name cannot be empty", t);
        if (!quoted && this.#isPunct("(")) return this.#call(t);
        return { kind: "column", pos: t.pos, name: t.text };
      }
      case "punctuation":
        if (t.text === "(") {
          const inner = this.#expression();
          this.#expect(")", "to close '('");
          return inner;
        }
        if (t.text === "[") return this.#list(t);
        if (t.text === "{") return this.#object(t);
        return this.#fail(this.#unexpected(t), t);
      case "end":
        return this.#fail(this.#unexpected(t), t);
    }
  }

  #call(name: Token): Node {
    this.#next(); // (
    this.#enter(name);
    const args = this.#items(")", `to close the call to ${name.text}()`);
    this.#leave();
    return { kind: "call", pos: name.pos, name: name.text, args };
  }

  #list(open: Token): Node {
    this.#enter(open);
    const items = this.#items("]", "to close the list");
    this.#leave();
    return { kind: "list", pos: open.pos, items };
  }

  /** `{ 'key': expr, name: expr }`: keys are strings or bare names; a key given twice is an error. */
  #object(open: Token): Node {
    this.#enter(open);
    const entries: Array<{ key: string; value: Node }> = [];
    const seen = new Set<string>();
    while (!this.#isPunct("}")) {
      const key = this.#next();
      if (key.kind !== "string" && key.kind !== "identifier" && key.kind !== "keyword") {
        this.#fail(`${this.#unexpected(key)}, expected a key ('name' or name) in the object`, key);
      }
      if (seen.has(key.text)) this.#fail(`the key ${JSON.stringify(key.text)} is given twice in the object`, key);
      seen.add(key.text);
      this.#expect(":", `after the key ${JSON.stringify(key.text)}`);
      entries.push({ key: key.text, value: this.#expression() });
      if (!this.#isPunct(",")) break;
      this.#next();
    }
    this.#expect("}", "to close the object");
    this.#leave();
    return { kind: "object", pos: open.pos, entries };
  }

  #items(close: string, context: string): Node[] {
    const items: Node[] = [];
    if (this.#isPunct(close)) {
      this.#next();
      return items;
    }
    for (;;) {
      items.push(this.#expression());
      if (this.#isPunct(",")) {
        this.#next();
        continue;
      }
      this.#expect(close, context);
      return items;
    }
  }
}
