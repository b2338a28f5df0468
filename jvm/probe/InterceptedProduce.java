// Produces with Apache Kafka's own Java producer and the kafka-audit interceptor, at timestamps of the caller's:
// `java -cp <kafka jars>:<interceptor jar> InterceptedProduce.java BOOTSTRAP TOPIC AUDIT_TOPIC AUDIT_PAYLOAD TS...`
// sends one message (key "k", value "vv") to partition 0 of TOPIC per timestamp TS (epoch ms), then AUDIT_PAYLOAD
// to AUDIT_TOPIC itself (which the interceptor must not count), and prints `sent N`. Its cluster is `dc1`.
// The content digest is on. Used by tests/jvm/test_java_interceptor.py to check windows, digests and messages
// without a usable timestamp.
import java.nio.charset.StandardCharsets;
import java.util.Properties;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class InterceptedProduce {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("key.serializer", ByteArraySerializer.class.getName());
        props.put("value.serializer", ByteArraySerializer.class.getName());
        props.put("acks", "all");
        props.put("interceptor.classes", "io.kaudit.KafkaAuditInterceptor");
        props.put("kaudit.cluster", "dc1");
        props.put("kaudit.digest", "true");
        props.put("kaudit.audit.topic", args[2]);
        byte[] key = "k".getBytes(StandardCharsets.UTF_8);
        byte[] value = "vv".getBytes(StandardCharsets.UTF_8);
        int sent = 0;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            for (int i = 4; i < args.length; i++) {
                producer.send(new ProducerRecord<>(args[1], 0, Long.parseLong(args[i]), key, value)).get();
                sent++;
            }
            producer.send(new ProducerRecord<>(args[2], args[3].getBytes(StandardCharsets.UTF_8))).get();
        }
        System.out.println("sent " + sent);
    }
}
