/**
 * The syntax tree of the value dialect. Every node records `pos`, the 0-based offset of the
 * token that errors about it should point at (the operator, the call's name, the `[`).
 */
import type { Value } from "./value.ts";

export type UnaryOperator = "-" | "!";

export type BinaryOperator =
  | "*" | "/" | "%"
  | "+" | "-"
  | "<" | "<=" | ">" | ">="
  | "==" | "!="
  | "in"
  | "&&"
  | "||";

export type Node =
  | { readonly kind: "literal"; readonly pos: number; readonly value: Value }
  | { readonly kind: "column"; readonly pos: number; readonly name: string }
  | { readonly kind: "member"; readonly pos: number; readonly object: Node; readonly name: string }
  | { readonly kind: "index"; readonly pos: number; readonly object: Node; readonly index: Node }
  | { readonly kind: "list"; readonly pos: number; readonly items: readonly Node[] }
  | { readonly kind: "object"; readonly pos: number; readonly entries: ReadonlyArray<{ readonly key: string; readonly value: Node }> }
  | { readonly kind: "unary"; readonly pos: number; readonly op: UnaryOperator; readonly operand: Node }
  | { readonly kind: "binary"; readonly pos: number; readonly op: BinaryOperator; readonly left: Node; readonly right: Node }
  | { readonly kind: "ternary"; readonly pos: number; readonly test: Node; readonly then: Node; readonly otherwise: Node }
  | { readonly kind: "call"; readonly pos: number; readonly name: string; readonly args: readonly Node[] };

/**
 * Binding strength of each binary operator, higher binds tighter; all are left-associative.
 * The ternary `?:` sits below all of them and is right-associative; unary `-` and `!` and the
 * postfix `.name`, `[index]` sit above.
 */
export const binaryPrecedence: Readonly<Record<BinaryOperator, number>> = {
  "||": 1,
  "&&": 2,
  in: 3,
  "==": 4,
  "!=": 4,
  "<": 5,
  "<=": 5,
  ">": 5,
  ">=": 5,
  "+": 6,
  "-": 6,
  "*": 7,
  "/": 7,
  "%": 7,
};

/** Columns a tree reads, deduplicated, in the order evaluation first reaches them. */
export function columnsOf(node: Node): string[] {
  const seen = new Set<string>();
  const visit = (n: Node): void => {
    switch (n.kind) {
      case "literal":
        return;
      case "column":
        seen.add(n.name);
        return;
      case "member":
        return visit(n.object);
      case "index":
        visit(n.object);
        return visit(n.index);
      case "list":
        return n.items.forEach(visit);
      case "object":
        return n.entries.forEach((e) => visit(e.value));
      case "unary":
        return visit(n.operand);
      case "binary":
        visit(n.left);
        return visit(n.right);
      case "ternary":
        visit(n.test);
        visit(n.then);
        return visit(n.otherwise);
      case "call":
        return n.args.forEach(visit);
    }
  };
  visit(node);
  return [...seen];
}
