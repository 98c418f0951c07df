/**
 * One error base for the engine, with a closed list of codes.
 *
 * Each code belongs to one recovery class (see `recoveryOf`), so the loop decides what to do
 * with a failure in one place: stop (fatal), give partitions up (fenced), back off (retryable)
 * or isolate the row (poison). State that does not decode is fatal: the changelog is the only
 * copy of it, so reading it again would find the same bytes.
 */
export const ErrorCodes = {
  /** The topology, a step or an expression is invalid. Found before anything is consumed. */
  INVALID_TOPOLOGY: "INVALID_TOPOLOGY",
  /** A STREAM_* setting or a host file is invalid. */
  INVALID_SETTINGS: "INVALID_SETTINGS",
  /** The host (TOML file, HTTP platform), or a network store it points at (S3), could not answer: retry. */
  HOST_UNAVAILABLE: "HOST_UNAVAILABLE",
  /** A Kafka operation failed in a way a retry may fix. */
  KAFKA_RETRYABLE: "KAFKA_RETRYABLE",
  /** The producer was fenced or this member left the group: give the partitions up. */
  KAFKA_FENCED: "KAFKA_FENCED",
  /** A Kafka operation failed for good. */
  KAFKA_FATAL: "KAFKA_FATAL",
  /** Restored state (a changelog record, a snapshot) could not be decoded: fatal. */
  STATE_CORRUPTED: "STATE_CORRUPTED",
  /** A stateful task holds more live keys than STREAM_STATE_MAX_KEYS allows. */
  STATE_LIMIT: "STATE_LIMIT",
  /** A state store refused a write or could not be opened: the local one (STREAM_STATE_DIR: disk full, read-only), S3 (access denied), the http sink's window. */
  STATE_STORE_FAILED: "STATE_STORE_FAILED",
  /** STREAM_CHECKPOINT_MAX_FAILURES checkpoints failed in a row: the Checkpointer's circuit opened. */
  CHECKPOINT_CIRCUIT_OPEN: "CHECKPOINT_CIRCUIT_OPEN",
  /** A sink (postgres, http) could not be reached, or answered that it is overloaded: wait and retry. */
  SINK_UNAVAILABLE: "SINK_UNAVAILABLE",
  /** A sink refused the stream itself, not a row: wrong password, no such database, no permission on the table. */
  SINK_FAILED: "SINK_FAILED",
  /** Another member claimed a partition this one wrote for (the database said so): give the partitions up. */
  SINK_FENCED: "SINK_FENCED",
  /** A bug: an illegal state transition, a broken invariant, or an error no part of the engine sorted. */
  INTERNAL: "INTERNAL",
  /** One row could not be processed: isolate it, count it, dead-letter it. */
  POISON_ROW: "POISON_ROW",
  /** An expression failed at run time on one row (type error, division by zero, function). */
  EXPRESSION_EVAL: "EXPRESSION_EVAL",
  /** An expression failed to compile (syntax, unknown function, arity). */
  EXPRESSION_COMPILE: "EXPRESSION_COMPILE",
} as const;

export type ErrorCode = (typeof ErrorCodes)[keyof typeof ErrorCodes];

export type Recovery = "fatal" | "fenced" | "retryable" | "poison";

/** Where an error happened: whatever of these the reader needs to find it. */
export interface ErrorContext {
  stage?: number;
  step?: number;
  field?: string;
  topic?: string;
  partition?: number;
  offset?: string;
  [key: string]: unknown;
}

export class FvError extends Error {
  readonly code: ErrorCode;
  readonly context: ErrorContext;

  constructor(code: ErrorCode, message: string, options: { cause?: unknown; context?: ErrorContext } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "FvError";
    this.code = code;
    this.context = options.context ?? {};
  }
}

const recoveryByCode: Record<ErrorCode, Recovery> = {
  INVALID_TOPOLOGY: "fatal",
  INVALID_SETTINGS: "fatal",
  HOST_UNAVAILABLE: "retryable",
  KAFKA_RETRYABLE: "retryable",
  KAFKA_FENCED: "fenced",
  KAFKA_FATAL: "fatal",
  STATE_CORRUPTED: "fatal",
  STATE_LIMIT: "fatal",
  STATE_STORE_FAILED: "fatal",
  CHECKPOINT_CIRCUIT_OPEN: "fatal",
  SINK_UNAVAILABLE: "retryable",
  SINK_FAILED: "fatal",
  SINK_FENCED: "fenced",
  INTERNAL: "fatal",
  POISON_ROW: "poison",
  EXPRESSION_EVAL: "poison",
  EXPRESSION_COMPILE: "fatal",
};

/** The one place that sorts a failure by the recovery it needs. Unknown errors are fatal. */
export function recoveryOf(error: unknown): Recovery {
  return error instanceof FvError ? recoveryByCode[error.code] : "fatal";
}

/** The error as an FvError: itself, or an INTERNAL one (fatal) carrying it as its cause. */
export function asFvError(error: unknown): FvError {
  return error instanceof FvError ? error : new FvError("INTERNAL", (error as Error)?.message ?? String(error), { cause: error });
}
