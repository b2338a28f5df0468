package io.kaudit;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Turns drained counts into count records (the wire form of audit.contract.record.encode, byte for byte) and
 * sends them with the interceptor's own producer. A record whose send fails stays pending and goes again, with
 * the same record id, at the next emission; the reconciliation keeps each record id once. While any record made
 * is not delivered, no new one is made: the counts keep merging in the {@link WindowTally}, which bounds them and
 * remembers the windows it had to drop; once the audit topic takes records again, each such (topic, window) gets
 * a record of count 0 flagged unknown, then the counts merged meanwhile follow.
 */
final class AuditEmitter {
    static final long RETRY_PAUSE_MS = 500;
    private static final Logger log = LoggerFactory.getLogger(AuditEmitter.class);
    private static final DateTimeFormatter SECONDS =
            DateTimeFormatter.ofPattern("uuuu-MM-dd'T'HH:mm:ss'Z'").withZone(ZoneOffset.UTC);
    private static final DateTimeFormatter MILLIS =
            DateTimeFormatter.ofPattern("uuuu-MM-dd'T'HH:mm:ss.SSS'Z'").withZone(ZoneOffset.UTC);

    private final AuditSettings settings;
    private final Producer<byte[], byte[]> producer;
    final String instanceId;
    private long sequence;
    private final Map<String, byte[]> pending = new LinkedHashMap<>(); // record id -> payload, oldest first
    private final Set<String> inFlight = new HashSet<>();

    AuditEmitter(AuditSettings settings, Producer<byte[], byte[]> producer) {
        this.settings = settings;
        this.producer = producer;
        this.instanceId = settings.service() + "-" + UUID.randomUUID().toString().replace("-", "").substring(0, 12);
    }

    /** Once every record made is delivered, new ones from `tally` (its lost windows first); then every pending
     * record not in flight sent. The number sent. */
    int emit(WindowTally tally) {
        logDropped(tally);
        List<Map.Entry<String, byte[]>> toSend = new ArrayList<>();
        synchronized (this) {
            if (pending.isEmpty()) {
                long now = System.currentTimeMillis();
                for (WindowTally.Entry entry : tally.lost.take(settings.maxEntries())) {
                    add(entry, now);
                }
                for (WindowTally.Entry entry : tally.drain()) {
                    add(entry, now);
                }
            }
            for (Map.Entry<String, byte[]> record : pending.entrySet()) {
                if (inFlight.add(record.getKey())) {
                    toSend.add(Map.entry(record.getKey(), record.getValue()));
                }
            }
        }
        // Outside the lock: send() may wait for the audit topic's metadata, and the callbacks take the lock.
        for (Map.Entry<String, byte[]> record : toSend) {
            send(record.getKey(), record.getValue());
        }
        return toSend.size();
    }

    private void add(WindowTally.Entry entry, long now) {
        String recordId = instanceId + ":" + ++sequence;
        pending.put(recordId, encode(recordId, entry, now).getBytes(StandardCharsets.UTF_8));
    }

    private void logDropped(WindowTally tally) {
        long[] dropped = tally.takeDropped();
        if (dropped[0] > 0) {
            log.error("kaudit: the audit topic has not taken the counts, and over {} (topic, window)s are open ({}):"
                    + " dropped the oldest, to be reported unknown once it does: windows={} messages={}"
                    + " lost_windows={} audit_topic={}", settings.maxEntries(), AuditSettings.MAX_ENTRIES,
                    dropped[0], dropped[1], tally.lost, settings.auditTopic());
        }
    }

    synchronized int pendingCount() {
        return pending.size();
    }

    /** Delivers every pending record, and what `tally` still holds, by `deadlineMs` (epoch ms), again after a
     * failure, then closes the audit producer; what is still undelivered then is lost, and said so. */
    void close(WindowTally tally, long deadlineMs) {
        try {
            emit(tally);
            while ((awaitInFlight(deadlineMs) || !tally.isEmpty() || !tally.lost.isEmpty())
                    && System.currentTimeMillis() < deadlineMs) {
                if (pendingCount() > 0) {
                    Thread.sleep(Math.min(RETRY_PAUSE_MS, Math.max(0, deadlineMs - System.currentTimeMillis())));
                }
                emit(tally);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        producer.close(Duration.ofMillis(Math.max(0, deadlineMs - System.currentTimeMillis())));
        int left = pendingCount();
        if (left > 0 || !tally.isEmpty() || !tally.lost.isEmpty()) {
            log.warn("kaudit: audit records not delivered at close, lost: count={} undrained_windows={}"
                    + " lost_windows={} cluster={} audit_topic={}", left, tally.drain().size(), tally.lost,
                    settings.cluster(), settings.auditTopic());
        }
    }

    /** Waits until no record is in flight or the deadline passes; true when some are still pending. */
    private synchronized boolean awaitInFlight(long deadlineMs) throws InterruptedException {
        long left;
        while (!inFlight.isEmpty() && (left = deadlineMs - System.currentTimeMillis()) > 0) {
            wait(left);
        }
        return !pending.isEmpty();
    }

    private void send(String recordId, byte[] payload) {
        try {
            producer.send(new ProducerRecord<>(settings.auditTopic(), null, payload),
                    (metadata, exception) -> delivered(recordId, exception));
        } catch (RuntimeException e) {
            delivered(recordId, e);
        }
    }

    private synchronized void delivered(String recordId, Exception exception) {
        inFlight.remove(recordId);
        notifyAll();
        if (exception == null) {
            pending.remove(recordId);
        } else if (pending.containsKey(recordId)) {
            log.warn("kaudit: audit record not delivered, will retry: record_id={} audit_topic={} error={}",
                    recordId, settings.auditTopic(), exception.toString());
        }
    }

    /** A count record as audit.contract.record.encode writes it: compact JSON, keys sorted, ASCII only. */
    String encode(String recordId, WindowTally.Entry entry, long emittedAtMs) {
        StringBuilder json = new StringBuilder(400).append('{');
        if (appendPartitions(json, "by_partition", entry.byPartition, entry.byPartition)) {
            json.append(',');
        }
        json.append("\"bytes\":").append(entry.bytes);
        string(json.append(",\"cluster\":"), settings.cluster());
        json.append(",\"count\":").append(entry.count);
        if (!entry.digestUnknown && entry.count > 0) {
            appendPartitions(json.append(','), "digest_by_partition", entry.byPartition, entry.digestByPartition);
        }
        string(json.append(",\"emitted_at\":"), MILLIS.format(Instant.ofEpochMilli(emittedAtMs)));
        string(json.append(",\"host\":"), settings.host());
        string(json.append(",\"instance_id\":"), instanceId);
        json.append(",\"kind\":\"count\"");
        json.append(",\"no_timestamp\":").append(entry.noTimestamp);
        string(json.append(",\"record_id\":"), recordId);
        json.append(",\"schema_version\":2");
        json.append(",\"send_failed\":").append(entry.sendFailed);
        string(json.append(",\"service\":"), settings.service());
        json.append(",\"tier\":\"producer\"");
        string(json.append(",\"topic\":"), entry.topic);
        if (entry.unknown || settings.transactional()) {
            json.append(",\"unknown\":true");
        }
        json.append(",\"window_minutes\":").append(settings.windowMinutes());
        string(json.append(",\"window_start\":"), SECONDS.format(Instant.ofEpochMilli(entry.windowStartMs)));
        return json.append('}').toString();
    }

    /** `"<name>":{...}`: `values` of the partitions counted in `byPartition`, keys sorted as strings (as
     * json.dumps sorts them); nothing, and false, when none was. */
    static boolean appendPartitions(StringBuilder json, String name, long[] byPartition, long[] values) {
        List<String> keys = new ArrayList<>();
        for (int partition = 0; partition < byPartition.length; partition++) {
            if (byPartition[partition] > 0) {
                keys.add(Integer.toString(partition));
            }
        }
        if (keys.isEmpty()) {
            return false;
        }
        String[] sorted = keys.toArray(new String[0]);
        Arrays.sort(sorted);
        string(json, name);
        json.append(":{");
        for (int i = 0; i < sorted.length; i++) {
            string(json.append(i == 0 ? "" : ","), sorted[i]);
            json.append(':').append(values[Integer.parseInt(sorted[i])]);
        }
        json.append('}');
        return true;
    }

    /** A JSON string as Python's json.dumps (ensure_ascii) writes it: \" \\ \b \f \n \r \t, else \\u00xx below
     * a space, and \\uxxxx (lower-case hex, UTF-16 units) for DEL and beyond ASCII. */
    static void string(StringBuilder json, String text) {
        json.append('"');
        for (int i = 0; i < text.length(); i++) {
            char c = text.charAt(i);
            switch (c) {
                case '"' -> json.append("\\\"");
                case '\\' -> json.append("\\\\");
                case '\b' -> json.append("\\b");
                case '\f' -> json.append("\\f");
                case '\n' -> json.append("\\n");
                case '\r' -> json.append("\\r");
                case '\t' -> json.append("\\t");
                default -> {
                    if (c < 0x20 || c >= 0x7f) {
                        json.append(String.format("\\u%04x", (int) c));
                    } else {
                        json.append(c);
                    }
                }
            }
        }
        json.append('"');
    }
}
