// Counts the messages of one topic with the plain Java Kafka client, configured from a properties file:
// `java -cp <kafka jars> CountMessages.java client.properties TOPIC EXPECTED TIMEOUT_S` prints `counted N`.
// Used by the tests to prove that audit.clients.java_client_options gives Spark's Kafka client what it needs.
import java.io.FileReader;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class CountMessages {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        try (FileReader reader = new FileReader(args[0])) {
            props.load(reader);
        }
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        props.put("enable.auto.commit", "false");
        long expected = Long.parseLong(args[2]);
        long deadline = System.currentTimeMillis() + Long.parseLong(args[3]) * 1000;
        long counted = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            List<TopicPartition> partitions = new ArrayList<>();
            for (PartitionInfo info : consumer.partitionsFor(args[1], Duration.ofSeconds(30))) {
                partitions.add(new TopicPartition(info.topic(), info.partition()));
            }
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            while (counted < expected && System.currentTimeMillis() < deadline) {
                counted += consumer.poll(Duration.ofMillis(500)).count();
            }
        }
        System.out.println("counted " + counted);
    }
}
