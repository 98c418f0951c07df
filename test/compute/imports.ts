/** What the compute tests use from the engine. */
export * from "../../src/compute/index.ts";
export { FvError } from "../../src/errors.ts";
