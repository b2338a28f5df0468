package io.kaudit;

import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;
import java.util.regex.Pattern;
import org.apache.kafka.clients.CommonClientConfigs;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * The interceptor's settings, read from the host producer's configs (every value as a string), and the config
 * of the producer that writes the audit records.
 */
record AuditSettings(
        String cluster,
        String auditTopic,
        int windowMinutes,
        long flushIntervalMs,
        String service,
        String host,
        String clientId,
        boolean digest,
        int maxEntries,
        boolean transactional) {

    static final String CLUSTER = "kaudit.cluster";
    static final String AUDIT_TOPIC = "kaudit.audit.topic";
    static final String WINDOW_MINUTES = "kaudit.window.minutes";
    static final String FLUSH_INTERVAL_MS = "kaudit.flush.interval.ms";
    static final String SERVICE = "kaudit.service";
    static final String HOST = "kaudit.host";
    static final String DIGEST = "kaudit.digest";
    // The (topic, window)s whose counts are kept while the audit topic does not take them; beyond, the oldest
    // windows are dropped and reported unknown once it does.
    static final String MAX_ENTRIES = "kaudit.tally.max.entries";

    static final int MAX_SERVICE_CHARS = 128; // keeps `<service>-<12 hex>:<sequence>` within the 200 a record id may have
    // What a cluster (and a tier) may be called inside an audit record.
    static final Pattern NAME = Pattern.compile(Contract.NAME_PATTERN);
    static final Pattern CONTROL = Pattern.compile(Contract.CONTROL_CHARACTERS);
    // The host producer's settings the audit producer needs to reach the same cluster the same way.
    static final String[] COPIED_PREFIXES = {"sasl.", "ssl."};
    static final String[] COPIED_KEYS = {
        CommonClientConfigs.BOOTSTRAP_SERVERS_CONFIG,
        CommonClientConfigs.SECURITY_PROTOCOL_CONFIG,
        CommonClientConfigs.CLIENT_DNS_LOOKUP_CONFIG,
    };

    long windowMs() {
        return windowMinutes * Contract.MS_PER_MINUTE;
    }

    static AuditSettings from(Map<String, ?> configs) {
        String cluster = text(configs, CLUSTER, null);
        if (cluster == null || cluster.isEmpty()) {
            throw new ConfigException("Missing required configuration \"" + CLUSTER + "\" which has no default value:"
                    + " the name of the cluster this producer writes to, as the audit records name it");
        }
        if (!NAME.matcher(cluster).matches()) {
            throw new ConfigException(CLUSTER, cluster, "a name is 1 to 64 letters, digits, '.', '_' or '-'");
        }
        String service = text(configs, SERVICE, "java-app");
        if (service.isEmpty() || service.length() > MAX_SERVICE_CHARS || CONTROL.matcher(service).find()) {
            throw new ConfigException(SERVICE, service, "1 to " + MAX_SERVICE_CHARS + " characters, none a control character");
        }
        String auditTopic = text(configs, AUDIT_TOPIC, Contract.DEFAULT_AUDIT_TOPIC);
        if (auditTopic.isEmpty()) {
            throw new ConfigException(AUDIT_TOPIC, auditTopic, "the audit topic needs a name");
        }
        int minutes = (int) number(configs, WINDOW_MINUTES, Contract.DEFAULT_WINDOW_MINUTES, Contract.MINUTES_PER_DAY);
        if (Contract.MINUTES_PER_DAY % minutes != 0) {
            throw new ConfigException(WINDOW_MINUTES, minutes,
                    "does not divide a day (" + Contract.MINUTES_PER_DAY + " minutes) evenly");
        }
        long flushMs = number(configs, FLUSH_INTERVAL_MS, Contract.DEFAULT_FLUSH_INTERVAL_MS, Long.MAX_VALUE / 2);
        String host = text(configs, HOST, null);
        Object clientId = configs.get(CommonClientConfigs.CLIENT_ID_CONFIG);
        String digest = text(configs, DIGEST, "false");
        if (!digest.equals("true") && !digest.equals("false")) {
            throw new ConfigException(DIGEST, digest, "true or false");
        }
        int maxEntries = (int) number(configs, MAX_ENTRIES, Contract.DEFAULT_MAX_ENTRIES, Contract.MAX_MAX_ENTRIES);
        Object transactionalId = configs.get(ProducerConfig.TRANSACTIONAL_ID_CONFIG);
        return new AuditSettings(cluster, auditTopic, minutes, flushMs, service,
                host == null || host.isEmpty() ? hostName() : host, clientId == null ? "" : String.valueOf(clientId),
                digest.equals("true"), maxEntries, transactionalId != null && !String.valueOf(transactionalId).isBlank());
    }

    /** The longest a record of the host producer can be between onSend and its acknowledgement: its send may wait
     * max.block.ms, then delivery.timeout.ms bounds the rest; a minute more for the I/O thread to call back. */
    static long acknowledgedWithinMs(Map<String, ?> configs) {
        return millis(configs, ProducerConfig.MAX_BLOCK_MS_CONFIG, 60_000)
                + millis(configs, ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 120_000) + 60_000;
    }

    /** A duration the host producer has already validated; its default when unset. */
    private static long millis(Map<String, ?> configs, String key, long fallback) {
        try {
            String value = text(configs, key, null);
            return value == null || value.isEmpty() ? fallback : Math.max(0, Math.min(Long.parseLong(value), 1L << 40));
        } catch (NumberFormatException e) {
            return fallback;
        }
    }

    /** The audit producer's config: the host's way to the cluster, acks=all, idempotence, no interceptor. */
    Map<String, Object> auditProducerConfig(Map<String, ?> configs) {
        Map<String, Object> config = new HashMap<>();
        for (Map.Entry<String, ?> entry : configs.entrySet()) {
            if (copied(entry.getKey()) && entry.getValue() != null) {
                config.put(entry.getKey(), entry.getValue());
            }
        }
        config.put(ProducerConfig.ACKS_CONFIG, "all");
        config.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        config.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        config.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        config.put(ProducerConfig.CLIENT_ID_CONFIG, (clientId.isEmpty() ? "producer" : clientId) + "-kaudit");
        // A send waits this long at most for the audit topic's metadata: close() has 30 s for everything.
        config.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "10000");
        return config;
    }

    static boolean copied(String key) {
        for (String name : COPIED_KEYS) {
            if (name.equals(key)) {
                return true;
            }
        }
        for (String prefix : COPIED_PREFIXES) {
            if (key.startsWith(prefix)) {
                return true;
            }
        }
        return false;
    }

    private static String text(Map<String, ?> configs, String key, String fallback) {
        Object value = configs.get(key);
        return value == null ? fallback : String.valueOf(value).trim();
    }

    private static long number(Map<String, ?> configs, String key, long fallback, long most) {
        String value = text(configs, key, null);
        if (value == null || value.isEmpty()) {
            return fallback;
        }
        long parsed;
        try {
            parsed = Long.parseLong(value);
        } catch (NumberFormatException e) {
            throw new ConfigException(key, value, "not a whole number");
        }
        if (parsed < 1 || parsed > most) {
            throw new ConfigException(key, value, "not between 1 and " + most);
        }
        return parsed;
    }

    /** This machine's name, as Python's socket.gethostname() gives it; never a DNS look-up when Linux says it. */
    static String hostName() {
        try {
            String name = Files.readString(Path.of("/proc/sys/kernel/hostname"), StandardCharsets.UTF_8).trim();
            if (!name.isEmpty()) {
                return name;
            }
        } catch (Exception e) {
            // not Linux: ask Java
        }
        try {
            return InetAddress.getLocalHost().getHostName();
        } catch (Exception e) {
            return "unknown";
        }
    }
}
