package io.kaudit;

import java.time.Duration;
import java.util.Map;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.regex.Pattern;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerInterceptor;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.header.Headers;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Audits any Java Kafka producer: the producer tier's counts of kafka-audit, from what the brokers acknowledged.
 *
 * <pre>
 * interceptor.classes=io.kaudit.KafkaAuditInterceptor
 * kaudit.cluster=dc1                  (required: the cluster this producer writes to)
 * kaudit.audit.topic={@value Contract#DEFAULT_AUDIT_TOPIC}
 * kaudit.window.minutes={@value Contract#DEFAULT_WINDOW_MINUTES}
 * kaudit.flush.interval.ms={@value Contract#DEFAULT_FLUSH_INTERVAL_MS}
 * kaudit.service=java-app             kaudit.host=(this machine's name)
 * kaudit.digest=false                 kaudit.digest.exclude=(a regex of topics sent without a content digest)
 * kaudit.tally.max.entries={@value Contract#DEFAULT_MAX_ENTRIES} ((topic, window)s kept while the audit topic takes nothing)
 * </pre>
 *
 * Each acknowledged message counts once in the window of its timestamp (CreateTime, or the broker's
 * LogAppendTime), with its key and value bytes, its partition and, with kaudit.digest=true, its content digest
 * ({@link SendDigests}: the hash of its serialized key and value, taken at send time; off by default, since it
 * costs a producer at full speed about a fifth of its throughput); a failed send counts as {@code send_failed} in
 * the window of the message as sent ({@link AuditTime#ofSend}, kept from {@link #onSend}). Every flush interval,
 * and at close, one count record per (topic, window) goes to the audit topic of the same cluster through the
 * interceptor's own producer (acks=all, idempotent, no interceptor); while that topic takes nothing, the counts
 * merge ({@link AuditEmitter}). A producer with a {@code transactional.id} (Kafka Streams exactly-once, Flink)
 * flags every record {@code unknown}: an interceptor is told of no commit or abort, so its counts hold messages
 * of aborted transactions, which a read_committed reader never sees. The records sent never change:
 * {@link #onSend} returns each one as it is. It refuses to load on a kafka-clients
 * outside the versions it was tested with ({@link ClientVersions}).
 */
public class KafkaAuditInterceptor implements ProducerInterceptor<Object, Object> {
    static final long CLOSE_TIMEOUT_MS = 30_000;
    private static final Logger log = LoggerFactory.getLogger(KafkaAuditInterceptor.class);

    private AuditSettings settings;
    private WindowTally tally;
    private SendDigests digests; // null: no content digest (said in the log)
    private final PendingHashes sendTimes = new PendingHashes(); // audit times as sent, for a failed send's window
    private long acknowledgedWithinMs; // older entries of sendTimes and digests are swept
    private AuditEmitter emitter;
    private ScheduledExecutorService scheduler;
    private final AtomicLong unattributed = new AtomicLong();

    @Override
    public void configure(Map<String, ?> configs) {
        settings = AuditSettings.from(configs);
        tally = new WindowTally(settings.windowMs(), settings.maxEntries());
        acknowledgedWithinMs = AuditSettings.acknowledgedWithinMs(configs);
        Pattern digestExclude = SendDigests.excludePattern(configs); // refused when bad, even with the digest off
        digests = settings.digest() ? SendDigests.of(configs, digestExclude) : null;
        KafkaProducer<byte[], byte[]> auditProducer = new KafkaProducer<>(settings.auditProducerConfig(configs));
        String clientsVersion;
        try {
            clientsVersion = ClientVersions.requireTested(auditProducer.metrics());
        } catch (RuntimeException refused) {
            auditProducer.close(Duration.ZERO);
            throw refused;
        }
        emitter = new AuditEmitter(settings, auditProducer);
        scheduler = Executors.newSingleThreadScheduledExecutor(task -> {
            Thread thread = new Thread(task, "kaudit-emitter-" + settings.clientId());
            thread.setDaemon(true);
            return thread;
        });
        long interval = settings.flushIntervalMs();
        scheduler.scheduleWithFixedDelay(this::emitQuietly, interval, interval, TimeUnit.MILLISECONDS);
        log.info("kaudit: auditing producer: client_id={} cluster={} audit_topic={} window_minutes={} instance_id={}"
                + " kafka_clients={} digest={}", settings.clientId(), settings.cluster(), settings.auditTopic(),
                settings.windowMinutes(), emitter.instanceId, clientsVersion, digests != null);
    }

    @Override
    public ProducerRecord<Object, Object> onSend(ProducerRecord<Object, Object> record) {
        if (digests != null) {
            digests.sent(record);
        }
        Long timestamp = record.timestamp();
        long now = timestamp == null ? System.currentTimeMillis() : 0;
        sendTimes.add(record.headers(), AuditTime.ofSend(timestamp, record.headers(), now));
        return record;
    }

    @Override
    public void onAcknowledgement(RecordMetadata metadata, Exception exception) {
        onAcknowledgement(metadata, exception, null);
    }

    @Override
    public void onAcknowledgement(RecordMetadata metadata, Exception exception, Headers headers) {
        Long hash = digests == null ? null : digests.acknowledged(headers);
        long sentAt = headers == null ? AuditTime.NONE : sendTimes.take(headers, AuditTime.NONE);
        if (metadata == null) {
            long n = unattributed.incrementAndGet();
            if (n == 1 || n % 10_000 == 0) {
                log.warn("kaudit: an acknowledgement without metadata cannot be counted: unattributed={} error={}",
                        n, String.valueOf(exception));
            }
            return;
        }
        String topic = metadata.topic();
        if (topic.equals(settings.auditTopic())) {
            return;
        }
        if (exception != null) {
            // The metadata of a failed send carries no timestamp: the window is the one the message was sent for.
            tally.failed(topic, sentAt == AuditTime.NONE ? System.currentTimeMillis() : sentAt);
            return;
        }
        long timestamp = AuditTime.ofAck(metadata.timestamp());
        boolean usable = timestamp != AuditTime.NONE;
        long bytes = Math.max(0, metadata.serializedKeySize()) + Math.max(0, metadata.serializedValueSize());
        tally.acked(topic, usable ? timestamp : System.currentTimeMillis(), metadata.partition(), bytes, !usable, hash);
    }

    /** The last counts sent and delivered (30 s at most), then the audit producer closed. The host producer
     * closes its interceptors after its last acknowledgement, so nothing is counted after this. */
    @Override
    public void close() {
        if (scheduler == null) {
            return; // configure() failed
        }
        long deadline = System.currentTimeMillis() + CLOSE_TIMEOUT_MS;
        scheduler.shutdown();
        try {
            scheduler.awaitTermination(CLOSE_TIMEOUT_MS / 3, TimeUnit.MILLISECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        emitter.close(tally, deadline);
        if (digests != null) {
            digests.close();
        }
        if (unattributed.get() > 0) {
            log.warn("kaudit: acknowledgements without metadata were not counted: unattributed={} cluster={}",
                    unattributed.get(), settings.cluster());
        }
    }

    private void emitQuietly() {
        try {
            long cutoff = System.currentTimeMillis() - acknowledgedWithinMs;
            sendTimes.sweep(cutoff);
            if (digests != null) {
                digests.sweep(cutoff);
            }
            emitter.emit(tally);
        } catch (RuntimeException e) {
            log.error("kaudit: emitting the counts failed: cluster={} audit_topic={}",
                    settings.cluster(), settings.auditTopic(), e);
        }
    }
}
