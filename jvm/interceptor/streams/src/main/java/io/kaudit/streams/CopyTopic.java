package io.kaudit.streams;

import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;

/**
 * A Kafka Streams application that copies one topic to another with processing.guarantee=exactly_once_v2, its
 * producer audited by the kafka-audit interceptor (cluster dc1):
 * {@code CopyTopic BOOTSTRAP APPLICATION_ID INPUT OUTPUT AUDIT_TOPIC STATE_DIR PAUSE_MS}. It pauses PAUSE_MS after
 * each record, so a transaction stays open long enough to be killed in; prints {@code running} once it runs, and
 * closes on SIGTERM.
 */
public final class CopyTopic {
    private CopyTopic() {}

    public static void main(String[] args) throws InterruptedException {
        long pauseMs = Long.parseLong(args[6]);
        StreamsBuilder builder = new StreamsBuilder();
        builder.<byte[], byte[]>stream(args[2]).peek((key, value) -> pause(pauseMs)).to(args[3]);
        KafkaStreams streams = new KafkaStreams(builder.build(), config(args));
        CountDownLatch stopped = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            if (now == KafkaStreams.State.RUNNING) {
                System.out.println("running");
                System.out.flush();
            }
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close();
            stopped.countDown();
        }));
        streams.start();
        stopped.await();
    }

    static Properties config(String[] args) {
        Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        props.put(StreamsConfig.STATE_DIR_CONFIG, args[5]);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, "1000");
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.ByteArraySerde.class.getName());
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.ByteArraySerde.class.getName());
        props.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
        // A killed instance's partitions go to its successor after this, not after the default 45 s.
        props.put(StreamsConfig.consumerPrefix("session.timeout.ms"), "6000");
        props.put(StreamsConfig.consumerPrefix("heartbeat.interval.ms"), "1000");
        props.put(StreamsConfig.producerPrefix(ProducerConfig.INTERCEPTOR_CLASSES_CONFIG),
                "io.kaudit.KafkaAuditInterceptor");
        props.put(StreamsConfig.producerPrefix("kaudit.cluster"), "dc1");
        props.put(StreamsConfig.producerPrefix("kaudit.audit.topic"), args[4]);
        props.put(StreamsConfig.producerPrefix("kaudit.flush.interval.ms"), "500");
        return props;
    }

    private static void pause(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
