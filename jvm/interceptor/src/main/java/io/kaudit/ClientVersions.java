package io.kaudit;

import java.io.IOException;
import java.io.InputStream;
import java.util.Map;
import java.util.Properties;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;

/**
 * The kafka-clients versions the interceptor was tested with (from jvm/interceptor/pom.xml, written into the jar
 * as {@value #RESOURCE}), and the gate that refuses any other: the interceptor runs inside other people's
 * producers, so it loads only where it is known to work.
 */
final class ClientVersions {
    static final String RESOURCE = "kaudit-interceptor.properties";
    // major.minor, then .patch if any; whatever follows (-SNAPSHOT, -rc1, ...) is ignored.
    private static final Pattern VERSION = Pattern.compile("(\\d+)\\.(\\d+)(?:\\.(\\d+))?.*");

    private ClientVersions() {}

    /**
     * The running kafka-clients version, or a ConfigException saying what to do when it was not tested. The version
     * is a client's public {@code app-info} metric (what JMX shows as {@code version}), read from `metrics` of a
     * client made by the same kafka-clients.
     */
    static String requireTested(Map<MetricName, ? extends Metric> metrics) {
        Properties tested = testedRange();
        String lowest = tested.getProperty("tested.clients.lowest");
        String beyond = tested.getProperty("tested.clients.beyond");
        String running = runningVersion(metrics);
        if (!within(running, lowest, beyond)) {
            throw new ConfigException("io.kaudit.KafkaAuditInterceptor refuses to load: the running kafka-clients is "
                    + running + ", and the interceptor was tested with kafka-clients " + lowest
                    + " and later, before " + beyond + ". Run the producer with a kafka-clients in that range, or"
                    + " remove io.kaudit.KafkaAuditInterceptor from interceptor.classes.");
        }
        return running;
    }

    static String runningVersion(Map<MetricName, ? extends Metric> metrics) {
        for (Map.Entry<MetricName, ? extends Metric> metric : metrics.entrySet()) {
            if (metric.getKey().group().equals("app-info") && metric.getKey().name().equals("version")) {
                return String.valueOf(metric.getValue().metricValue());
            }
        }
        return "unknown";
    }

    /** Whether `version` is at least `lowest` and before `beyond`; never when it is no version. */
    static boolean within(String version, String lowest, String beyond) {
        int[] running = parse(version);
        return running != null && compare(running, parse(lowest)) >= 0 && compare(running, parse(beyond)) < 0;
    }

    /** {major, minor, patch} of a version such as 4.3.1, 4.3 or 4.4.0-SNAPSHOT; null when it is none. */
    static int[] parse(String version) {
        Matcher m = version == null ? null : VERSION.matcher(version.trim());
        if (m == null || !m.matches()) {
            return null;
        }
        try {
            int patch = m.group(3) == null ? 0 : Integer.parseInt(m.group(3));
            return new int[] {Integer.parseInt(m.group(1)), Integer.parseInt(m.group(2)), patch};
        } catch (NumberFormatException e) {
            return null; // more digits than an int holds
        }
    }

    static int compare(int[] a, int[] b) {
        for (int i = 0; i < 3; i++) {
            if (a[i] != b[i]) {
                return Integer.compare(a[i], b[i]);
            }
        }
        return 0;
    }

    private static Properties testedRange() {
        Properties range = new Properties();
        try (InputStream in = ClientVersions.class.getResourceAsStream(RESOURCE)) {
            if (in == null) {
                throw new IllegalStateException("no " + RESOURCE + " beside io.kaudit.ClientVersions in the jar");
            }
            range.load(in);
        } catch (IOException e) {
            throw new IllegalStateException("cannot read " + RESOURCE + " from the jar", e);
        }
        if (parse(range.getProperty("tested.clients.lowest")) == null
                || parse(range.getProperty("tested.clients.beyond")) == null) {
            throw new IllegalStateException(RESOURCE + " states no tested range: " + range);
        }
        return range;
    }
}
