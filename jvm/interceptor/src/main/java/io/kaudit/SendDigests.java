package io.kaudit;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.regex.Pattern;
import java.util.regex.PatternSyntaxException;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.header.Headers;
import org.apache.kafka.common.serialization.Serializer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The message hashes of the records sent and not yet acknowledged. The interceptor sees a record's objects at
 * send time and its partition only at the acknowledgement, which carries no record: what ties the two together
 * is the record's {@link Headers} instance, which the producer hands to the acknowledgement (KIP-512). A record's
 * bytes are what the producer's own serializers make of it: this class runs instances of the same classes, with
 * the same configs, once more per record. A producer whose serializers cannot be built so (no public no-argument
 * constructor) sends no digest; nor does a topic `kaudit.digest.exclude` matches.
 */
final class SendDigests {
    static final String DIGEST_EXCLUDE = "kaudit.digest.exclude";
    // Verdicts of the exclude regex by topic, so a record costs a lookup, not a match. A producer writes to few
    // topics; one that writes to more starts the cache again rather than letting it grow.
    private static final int MAX_CACHED_TOPICS = 4096;
    private static final Logger log = LoggerFactory.getLogger(SendDigests.class);

    private final Serializer<Object> keySerializer;
    private final Serializer<Object> valueSerializer;
    private final Pattern exclude;
    private final Map<String, Boolean> excludedByTopic = new ConcurrentHashMap<>();
    private final PendingHashes pending = new PendingHashes();

    private SendDigests(Serializer<Object> keySerializer, Serializer<Object> valueSerializer, Pattern exclude) {
        this.keySerializer = keySerializer;
        this.valueSerializer = valueSerializer;
        this.exclude = exclude;
    }

    /**
     * The digests of a producer with `configs`, leaving out topics `exclude` finds; null when its serializers
     * cannot be built (said once, here).
     */
    static SendDigests of(Map<String, ?> configs, Pattern exclude) {
        try {
            return new SendDigests(serializer(configs, ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, true),
                    serializer(configs, ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, false), exclude);
        } catch (ReflectiveOperationException | RuntimeException e) {
            log.warn("kaudit: the producer's serializers cannot be built again: its count records carry no content"
                    + " digest, its windows are judged by counts: error={}", e.toString());
            return null;
        }
    }

    /** `kaudit.digest.exclude` of `configs`, null when unset; a value that is not a regex is refused by key. */
    static Pattern excludePattern(Map<String, ?> configs) {
        Object excluded = configs.get(DIGEST_EXCLUDE);
        if (excluded == null || String.valueOf(excluded).isBlank()) {
            return null;
        }
        try {
            return Pattern.compile(String.valueOf(excluded));
        } catch (PatternSyntaxException e) {
            throw new ConfigException(DIGEST_EXCLUDE, excluded, "not a regular expression: " + e.getDescription());
        }
    }

    @SuppressWarnings("unchecked")
    private static Serializer<Object> serializer(Map<String, ?> configs, String key, boolean isKey)
            throws ReflectiveOperationException {
        Object named = configs.get(key);
        Class<?> type = named instanceof Class<?> given ? given
                : Class.forName(String.valueOf(named).trim(), true, Thread.currentThread().getContextClassLoader());
        Serializer<Object> serializer = (Serializer<Object>) type.getDeclaredConstructor().newInstance();
        serializer.configure(configs, isKey);
        return serializer;
    }

    /** At send time: the record's hash, kept until its acknowledgement. */
    void sent(ProducerRecord<Object, Object> record) {
        if (exclude != null && isExcluded(record.topic())) {
            return;
        }
        Headers headers = record.headers();
        byte[] key = keySerializer.serialize(record.topic(), headers, record.key());
        byte[] value = valueSerializer.serialize(record.topic(), headers, record.value());
        long hash = ContentDigest.messageHash(key, value);
        pending.add(headers, hash);
    }

    private boolean isExcluded(String topic) {
        Boolean excluded = excludedByTopic.get(topic);
        if (excluded == null) {
            if (excludedByTopic.size() >= MAX_CACHED_TOPICS) {
                excludedByTopic.clear();
            }
            excluded = exclude.matcher(topic).find();
            excludedByTopic.put(topic, excluded);
        }
        return excluded;
    }

    /** At the acknowledgement of the record with `headers`: its hash, or null when none was kept. */
    Long acknowledged(Headers headers) {
        return headers == null ? null : pending.take(headers);
    }

    /** Forgets the hashes kept since before `cutoffMs`, whose acknowledgement will never find them. */
    int sweep(long cutoffMs) {
        return pending.sweep(cutoffMs);
    }

    void close() {
        keySerializer.close();
        valueSerializer.close();
    }
}
