/**
 * A ControlPlane in front of another that asks each start-up question once: the CLI looks at the
 * pipeline's datasets before the build starts (to learn the brokers the platform names), and
 * runStream then gets the same answers, or the same error, without a second round of requests.
 */
import type { BuildRecord, BuildSignal, ControlPlane, Logger, TopicBinding, Topology } from "../../src/index.ts";

export interface AskOnceHostOptions {
  /** Also write every build record here, one JSON line each (`--record-file`). */
  writeRecord?: (line: string) => void;
}

/**
 * @example
 * const host = new AskOnceHost(new HttpHost({ baseUrl }));
 * const brokers = await brokersOf(host, "demo", log); // asks topology and datasets
 * await runStream(host, "demo", "b1", record);        // answered from memory
 */
export class AskOnceHost implements ControlPlane {
  readonly #host: ControlPlane;
  readonly #options: AskOnceHostOptions;
  readonly #topologies = new Map<string, Promise<Topology>>();
  readonly #bindings = new Map<string, Promise<TopicBinding>>();

  constructor(host: ControlPlane, options: AskOnceHostOptions = {}) {
    this.#host = host;
    this.#options = options;
  }

  topology(pipeline: string): Promise<Topology> {
    return once(this.#topologies, pipeline, () => this.#host.topology(pipeline));
  }

  resolveTopic(dataset: string): Promise<TopicBinding> {
    return once(this.#bindings, dataset, () => this.#host.resolveTopic(dataset));
  }

  heartbeat(buildId: string): Promise<BuildSignal> {
    return this.#host.heartbeat(buildId);
  }

  putRecord(buildId: string, record: BuildRecord): Promise<void> {
    this.#options.writeRecord?.(JSON.stringify(record));
    return this.#host.putRecord(buildId, record);
  }
}

function once<T>(cache: Map<string, Promise<T>>, key: string, ask: () => Promise<T>): Promise<T> {
  let answer = cache.get(key);
  if (!answer) cache.set(key, (answer = ask()));
  return answer;
}

/**
 * The brokers the host names for the pipeline's first input dataset, or undefined when the host
 * cannot say now (then the build asks again and fails with the host's message). The engine
 * talks to one cluster; datasets that name others get a warning.
 */
export async function brokersOf(host: ControlPlane, pipeline: string, log: Logger): Promise<string | undefined> {
  let datasets: string[];
  try {
    const topology = await host.topology(pipeline);
    datasets = [...new Set(topology.stages.flatMap((s) => [...s.inputs, s.output]))];
  } catch {
    return undefined;
  }
  const bindings = await Promise.all(datasets.map((d) => host.resolveTopic(d).then((b) => ({ dataset: d, brokers: b.brokers }), () => undefined)));
  const known = bindings.filter((b) => b !== undefined);
  const chosen = known[0]?.brokers;
  const others = known.filter((b) => b.brokers !== chosen);
  if (chosen && others.length > 0) {
    log("warn", `datasets name different brokers; the stream connects to ${chosen} only (set STREAM_BROKERS to choose)`, {
      others: others.map((b) => `${b.dataset}=${b.brokers}`).join(", "),
    });
  }
  return chosen;
}
