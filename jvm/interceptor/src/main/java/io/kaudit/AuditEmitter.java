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
        appendPartitions(json, Contract.FIELD_BY_PARTITION, entry.byPartition, entry.byPartition);
        field(json, Contract.FIELD_BYTES).append(entry.bytes);
        string(field(json, Contract.FIELD_CLUSTER), settings.cluster());
        field(json, Contract.FIELD_COUNT).append(entry.count);
        if (!entry.digestUnknown && entry.count > 0) {
            appendPartitions(json, Contract.FIELD_DIGEST_BY_PARTITION, entry.byPartition, entry.digestByPartition);
        }
        string(field(json, Contract.FIELD_EMITTED_AT), MILLIS.format(Instant.ofEpochMilli(emittedAtMs)));
        string(field(json, Contract.FIELD_HOST), settings.host());
        string(field(json, Contract.FIELD_INSTANCE_ID), instanceId);
        string(field(json, Contract.FIELD_KIND), Contract.COUNT_KIND);
        field(json, Contract.FIELD_NO_TIMESTAMP).append(entry.noTimestamp);
        string(field(json, Contract.FIELD_RECORD_ID), recordId);
        field(json, Contract.FIELD_SCHEMA_VERSION).append(Contract.SCHEMA_VERSION);
        field(json, Contract.FIELD_SEND_FAILED).append(entry.sendFailed);
        string(field(json, Contract.FIELD_SERVICE), settings.service());
        string(field(json, Contract.FIELD_TIER), Contract.PRODUCER_TIER);
        string(field(json, Contract.FIELD_TOPIC), entry.topic);
        if (entry.unknown || settings.transactional()) {
            field(json, Contract.FIELD_UNKNOWN).append(true);
        }
        field(json, Contract.FIELD_WINDOW_MINUTES).append(settings.windowMinutes());
        string(field(json, Contract.FIELD_WINDOW_START), SECONDS.format(Instant.ofEpochMilli(entry.windowStartMs)));
        return json.append('}').toString();
    }

    /** `"<name>":` after a comma, unless it is the object's first key. */
    static StringBuilder field(StringBuilder json, String name) {
        if (json.charAt(json.length() - 1) != '{') {
            json.append(',');
        }
        string(json, name);
        return json.append(':');
    }

    /** `"<name>":{...}`: `values` of the partitions counted in `byPartition`, keys sorted as strings (as
     * json.dumps sorts them); nothing when none was. */
    static void appendPartitions(StringBuilder json, String name, long[] byPartition, long[] values) {
        List<String> keys = new ArrayList<>();
        for (int partition = 0; partition < byPartition.length; partition++) {
            if (byPartition[partition] > 0) {
                keys.add(Integer.toString(partition));
            }
        }
        if (keys.isEmpty()) {
            return;
        }
        String[] sorted = keys.toArray(new String[0]);
        Arrays.sort(sorted);
        field(json, name).append('{');
        for (int i = 0; i < sorted.length; i++) {
            string(json.append(i == 0 ? "" : ","), sorted[i]);
            json.append(':').append(values[Integer.parseInt(sorted[i])]);
        }
        json.append('}');
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
