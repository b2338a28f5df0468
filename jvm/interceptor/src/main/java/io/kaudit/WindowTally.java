package io.kaudit;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * The counts since the last drain, per (topic, window). The producer's I/O thread adds to it on every
 * acknowledgement, the emitter drains it: one short synchronized block each, never any I/O inside, and no
 * allocation while acknowledgements keep to one (topic, window), which they mostly do.
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

    private final long windowMs;
    private Map<Key, Entry> entries = new HashMap<>();
    private Entry last; // the entry of the last call: most acknowledgements are for the same one

    WindowTally(long windowMs) {
        this.windowMs = windowMs;
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

    /** A send that failed: counted in the window of now, and only as failed. */
    synchronized void failed(String topic, long nowMs) {
        entry(topic, nowMs).sendFailed++;
    }

    /** Everything counted since the last drain, in (topic, window) order; the tally starts again from nothing. */
    synchronized List<Entry> drain() {
        List<Entry> drained = new ArrayList<>(entries.values());
        entries = new HashMap<>();
        last = null;
        drained.sort((a, b) -> a.topic.equals(b.topic)
                ? Long.compare(a.windowStartMs, b.windowStartMs) : a.topic.compareTo(b.topic));
        return drained;
    }

    private Entry entry(String topic, long timestampMs) {
        long windowStartMs = Math.floorDiv(timestampMs, windowMs) * windowMs;
        Entry entry = last;
        if (entry != null && entry.windowStartMs == windowStartMs && entry.topic.equals(topic)) {
            return entry;
        }
        entry = entries.computeIfAbsent(new Key(topic, windowStartMs), key -> new Entry(key.topic(), key.windowStartMs()));
        last = entry;
        return entry;
    }
}
