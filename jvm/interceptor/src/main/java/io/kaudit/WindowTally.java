package io.kaudit;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;

/**
 * The counts since the last drain, per (topic, window). The producer's I/O thread adds to it on every
 * acknowledgement, the emitter drains it: one short synchronized block each, never any I/O inside, and no
 * allocation while acknowledgements keep to one (topic, window), which they mostly do. While the audit topic does
 * not take the records already made, the emitter does not drain: the counts keep merging here, so memory grows
 * with the (topic, window)s open, not with the outage. Past `maxEntries` of them, the oldest windows are dropped
 * and kept in {@link LostWindows}, to be reported unknown.
 */
final class WindowTally {

    /** The counts of one (topic, window). */
    static final class Entry {
        final String topic;
        final long windowStartMs;
        long count;
        long bytes;
        long sendFailed;
        long noTimestamp;
        long[] byPartition = new long[0]; // index: partition; 0 where none was counted
        long[] digestByPartition = new long[0]; // the wrapping sum of the hashes, same index
        boolean digestUnknown; // some message counted here came without its hash: no digest is sent
        boolean unknown; // a lost window's record: its counts were dropped

        Entry(String topic, long windowStartMs) {
            this.topic = topic;
            this.windowStartMs = windowStartMs;
        }

        void addPartition(int partition, Long hash) {
            if (partition >= byPartition.length) {
                byPartition = Arrays.copyOf(byPartition, Math.max(partition + 1, byPartition.length * 2));
                digestByPartition = Arrays.copyOf(digestByPartition, byPartition.length);
            }
            byPartition[partition]++;
            if (hash == null) {
                digestUnknown = true;
            } else {
                digestByPartition[partition] += hash;
            }
        }
    }

    private record Key(String topic, long windowStartMs) {}

    private static final Comparator<Entry> OLDEST_FIRST =
            Comparator.comparingLong((Entry e) -> e.windowStartMs).thenComparing(e -> e.topic);

    private final long windowMs;
    private final int maxEntries;
    final LostWindows lost;
    private Map<Key, Entry> entries = new HashMap<>();
    private TreeSet<Entry> byAge = new TreeSet<>(OLDEST_FIRST);
    private Entry last; // the entry of the last call: most acknowledgements are for the same one
    private long droppedWindows; // since the emitter last asked
    private long droppedMessages;

    WindowTally(long windowMs, int maxEntries) {
        this.windowMs = windowMs;
        this.maxEntries = maxEntries;
        this.lost = new LostWindows(windowMs);
    }

    /** Where an acknowledged message counts: the window of its timestamp (CreateTime or LogAppendTime); `hash`:
     * its content hash, null when unknown. */
    synchronized void acked(String topic, long timestampMs, int partition, long bytes, boolean noTimestamp, Long hash) {
        Entry entry = entry(topic, timestampMs);
        entry.count++;
        entry.bytes += bytes;
        if (noTimestamp) {
            entry.noTimestamp++;
        }
        entry.addPartition(partition, hash);
    }

    /** A send that failed: counted in the window of the message's audit time, and only as failed. */
    synchronized void failed(String topic, long auditTimeMs) {
        entry(topic, auditTimeMs).sendFailed++;
    }

    synchronized boolean isEmpty() {
        return entries.isEmpty();
    }

    /** {windows, messages} dropped since the last call: the emitter logs them, the I/O thread never does. */
    synchronized long[] takeDropped() {
        long[] dropped = {droppedWindows, droppedMessages};
        droppedWindows = 0;
        droppedMessages = 0;
        return dropped;
    }

    /** Everything counted since the last drain, in (topic, window) order; the tally starts again from nothing. */
    synchronized List<Entry> drain() {
        List<Entry> drained = new ArrayList<>(entries.values());
        entries = new HashMap<>();
        byAge = new TreeSet<>(OLDEST_FIRST);
        last = null;
        drained.sort((a, b) -> a.topic.equals(b.topic)
                ? Long.compare(a.windowStartMs, b.windowStartMs) : a.topic.compareTo(b.topic));
        return drained;
    }

    private Entry entry(String topic, long timestampMs) {
        long windowStartMs = AuditTime.windowStart(timestampMs, windowMs);
        Entry entry = last;
        if (entry != null && entry.windowStartMs == windowStartMs && entry.topic.equals(topic)) {
            return entry;
        }
        Key key = new Key(topic, windowStartMs);
        entry = entries.get(key);
        if (entry == null) {
            entry = new Entry(topic, windowStartMs);
            entries.put(key, entry);
            byAge.add(entry);
            dropBeyondLimit();
            if (!byAge.contains(entry)) {
                return entry; // dropped at once, the oldest of all: what it gets now is in no record
            }
        }
        last = entry;
        return entry;
    }

    /** The oldest (topic, window)s beyond `maxEntries`, maybe the one just made: their counts are gone, their
     * windows remembered as lost. */
    private void dropBeyondLimit() {
        while (entries.size() > maxEntries) {
            Entry oldest = byAge.pollFirst();
            entries.remove(new Key(oldest.topic, oldest.windowStartMs));
            lost.add(oldest.topic, oldest.windowStartMs);
            droppedWindows++;
            droppedMessages += oldest.count + oldest.sendFailed;
        }
    }
}
