/** Log levels, lowest first. */
export type LogLevel = "debug" | "info" | "warn" | "error";

/** Where the engine logs. Context carries pipeline, stage, partition and the like. */
export type Logger = (level: LogLevel, message: string, context?: Record<string, unknown>) => void;

export const silentLogger: Logger = () => {};
