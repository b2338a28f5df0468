package io.kaudit;

import java.time.Instant;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * The (topic, window)s whose counts were dropped, kept compactly: per topic a few ranges of window starts. Each is
 * written later as a record of count 0 with {@code unknown: true}, so the books judge those windows against the
 * origin cluster instead of taking what was delivered of them as their count. A range may take in windows between
 * two lost ones that lost nothing: they are reported unknown too, never complete.
 */
final class LostWindows {
    static final int MAX_RANGES_PER_TOPIC = 8;

    private final long windowMs;
    private final Map<String, List<long[]>> byTopic = new TreeMap<>(); // ranges {first, last}, in order

    LostWindows(long windowMs) {
        this.windowMs = windowMs;
    }

    synchronized boolean isEmpty() {
        return byTopic.isEmpty();
    }

    synchronized void add(String topic, long windowStartMs) {
        List<long[]> ranges = byTopic.computeIfAbsent(topic, t -> new ArrayList<>());
        int at = 0;
        while (at < ranges.size() && ranges.get(at)[1] + windowMs < windowStartMs) {
            at++;
        }
        if (at < ranges.size() && ranges.get(at)[0] - windowMs <= windowStartMs) {
            long[] range = ranges.get(at);
            range[0] = Math.min(range[0], windowStartMs);
            range[1] = Math.max(range[1], windowStartMs);
        } else {
            ranges.add(at, new long[] {windowStartMs, windowStartMs});
        }
        join(ranges);
    }

    /** Ranges that touch become one; beyond {@link #MAX_RANGES_PER_TOPIC}, the two closest become one. */
    private void join(List<long[]> ranges) {
        for (int i = ranges.size() - 1; i > 0; i--) {
            if (ranges.get(i - 1)[1] + windowMs >= ranges.get(i)[0]) {
                ranges.get(i - 1)[1] = Math.max(ranges.get(i - 1)[1], ranges.remove(i)[1]);
            }
        }
        while (ranges.size() > MAX_RANGES_PER_TOPIC) {
            int closest = 1;
            for (int i = 2; i < ranges.size(); i++) {
                if (ranges.get(i)[0] - ranges.get(i - 1)[1] < ranges.get(closest)[0] - ranges.get(closest - 1)[1]) {
                    closest = i;
                }
            }
            ranges.get(closest - 1)[1] = ranges.remove(closest)[1];
        }
    }

    /** Up to `most` lost (topic, window)s, oldest of each topic first, as entries of count 0 flagged unknown;
     * they are forgotten here. */
    synchronized List<WindowTally.Entry> take(int most) {
        List<WindowTally.Entry> taken = new ArrayList<>();
        Iterator<Map.Entry<String, List<long[]>>> topics = byTopic.entrySet().iterator();
        while (topics.hasNext() && taken.size() < most) {
            Map.Entry<String, List<long[]>> topic = topics.next();
            List<long[]> ranges = topic.getValue();
            while (!ranges.isEmpty() && taken.size() < most) {
                long[] range = ranges.get(0);
                WindowTally.Entry entry = new WindowTally.Entry(topic.getKey(), range[0]);
                entry.unknown = true;
                taken.add(entry);
                range[0] += windowMs;
                if (range[0] > range[1]) {
                    ranges.remove(0);
                }
            }
            if (ranges.isEmpty()) {
                topics.remove();
            }
        }
        return taken;
    }

    /** `topic=[first..last]` per range of window starts; for the log. */
    @Override
    public synchronized String toString() {
        StringBuilder text = new StringBuilder();
        for (Map.Entry<String, List<long[]>> topic : byTopic.entrySet()) {
            for (long[] range : topic.getValue()) {
                text.append(text.length() == 0 ? "" : " ").append(topic.getKey())
                        .append("=[").append(Instant.ofEpochMilli(range[0])).append("..")
                        .append(Instant.ofEpochMilli(range[1])).append(']');
            }
        }
        return text.toString();
    }
}
