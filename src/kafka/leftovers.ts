/**
 * What a transactional id's last transaction may have left open at the broker, and how it must end.
 *
 * A broker can write a transaction's CompleteCommit (or CompleteAbort) and skip its markers: it
 * does so for a partition with no leader, which is what a single broker's partitions have during
 * its controlled shutdown (docs/ARCHITECTURE.md, known issues). The records of that transaction
 * then stay open in its output partitions, and its offset commits pending in the group's
 * `__consumer_offsets` partition. Each piece is ended by the next marker of the same producer id
 * in its own partition, whatever transaction that marker belongs to: if the next transaction
 * aborts and touches only the outputs, while a later one commits offsets, the outputs are lost
 * and their offsets committed (soak seed 95: 153 rows lost).
 *
 * So every transaction first holds every piece its predecessor may have left: the groups it
 * committed offsets for (AddOffsetsToTxn) and the partitions it wrote to (AddPartitionsToTxn),
 * before it writes anything; whatever its markers say then says it for all of them at once. Once
 * those requests are answered the coordinator has finished the predecessor; if no broker
 * connection closed (or failed to open) between the predecessor's EndTxn and that answer, and
 * no carried partition still holds the predecessor open (the adapter asks the leaders: a broker
 * in its controlled shutdown skips markers and still answers, soak seed 106), its markers were
 * written, and the pieces are forgotten. Otherwise they are ended before any work, by a transaction that holds only them and
 * ends the way the predecessor did. A transaction that holds only them and did not get to hold
 * them all also ends that way, and the pieces are ended again. Kept per transactional id for the
 * life of the process, so a session's new producer ends what the last session's left.
 *
 * Pure bookkeeping: the adapter sends the requests and reports what happened.
 */
import type { TopicPartition } from "./port.ts";

/** What the open transaction does once it holds the pieces: go on with its work, or end as the predecessor did. */
export type Settle = "clean" | "commit" | "abort";

/** One `TransactionLeftovers` per transactional id, for the life of a client. */
export function leftoversById(): (transactionalId: string) => TransactionLeftovers {
  const byId = new Map<string, TransactionLeftovers>();
  return (id) => byId.get(id) ?? byId.set(id, new TransactionLeftovers()).get(id)!;
}

export class TransactionLeftovers {
  readonly #partitions = new Map<string, TopicPartition>();
  readonly #groups = new Set<string>();
  /** How the transaction that last ended ended (asked for: an unanswered EndTxn counts as asked). */
  #owed: "commit" | "abort" = "commit";
  /** Broker connections closed so far, and how many had when the last EndTxn went out (NaN: it did not go out). */
  #disconnects = 0;
  #since = 0;
  /** Counts every call that changes how the pieces end: a `checking` mark is taken back only if none came after it. */
  #marks = 0;
  /** The open transaction holds every piece carried into it; and whether the last one ended holding them all. */
  #holdsAll = true;
  #endedHoldingAll = true;

  /** A connection of this transactional id's producer to a broker closed. */
  disconnected(): void {
    this.#disconnects++;
  }

  /** The pieces a new transaction must hold before it writes. */
  carried(): { partitions: TopicPartition[]; groups: string[] } {
    return { partitions: [...this.#partitions.values()], groups: [...this.#groups] };
  }

  get empty(): boolean {
    return this.#partitions.size === 0 && this.#groups.size === 0;
  }

  /** A new transaction is about to ask for the carried pieces. */
  holding(): void {
    this.#holdsAll = this.empty;
  }

  /** A Produce request of the open transaction is about to write to this partition (-1: to a partition of this topic not known here). */
  addPartition(topic: string, partition: number): void {
    const key = `${topic}\u0000${partition}`;
    if (!this.#partitions.has(key)) this.#partitions.set(key, { topic, partition });
  }

  /** A TxnOffsetCommit request of the open transaction is about to commit offsets of this group. */
  addGroup(groupId: string): void {
    this.#groups.add(groupId);
  }

  /**
   * The open transaction's requests for the carried pieces were answered: "clean" forgets them
   * (their markers were written); otherwise the transaction must end now, holding only them, as
   * this says. `stillOpen`: a carried partition was seen holding an open transaction of this
   * producer id after the answer (DescribeProducers), so a marker was skipped although no
   * connection closed: a broker in its controlled shutdown skips the markers of its leaderless
   * partitions and still answers (soak seed 106: 50 rows lost).
   */
  held(stillOpen = false): Settle {
    this.#marks++;
    this.#holdsAll = true;
    if (this.empty || (!stillOpen && this.#endedHoldingAll && this.#disconnects === this.#since)) {
      this.#partitions.clear();
      this.#groups.clear();
      this.#owed = "commit";
      return "clean";
    }
    return this.#owed;
  }

  /** How the carried pieces must end: as the transaction that last ended did. */
  get owed(): "commit" | "abort" {
    return this.#owed;
  }

  /**
   * EndTxn(commit or abort) is about to go out for the open transaction. A transaction ends
   * without holding every carried piece only when it holds nothing else (a failure while it
   * held them, or it was ended to end them), and then it ends as `owed`: the pieces it did not
   * get to hold still owe the same.
   */
  ending(how: "commit" | "abort"): void {
    this.#marks++;
    this.#owed = how;
    this.#endedHoldingAll = this.#holdsAll;
    this.#since = this.#disconnects;
  }

  /**
   * The EndTxn that `ending` announced was not answered: its outcome is not known here, so its
   * pieces are ended again (as asked) by the next transaction whatever closed meanwhile.
   */
  dropped(): void {
    this.#marks++;
    this.#since = Number.NaN;
  }

  /**
   * A client that cannot hold the pieces asks after a transaction's end whether it is still open
   * where it wrote. Until the answer the pieces count as owed (ended again, as the transaction
   * asked, by whichever producer of this id comes next); the returned function takes that back
   * when the answer is "nowhere", unless anything else happened to the pieces meanwhile.
   */
  checking(): () => void {
    const since = this.#since;
    const mark = ++this.#marks;
    this.#since = Number.NaN;
    return () => {
      if (this.#marks === mark) this.#since = since;
    };
  }
}
