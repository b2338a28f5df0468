// Apache Kafka's own Java producer with the kafka-audit interceptor (cluster dc1), in the situations
// tests/jvm/test_java_interceptor.py puts it in: `java -cp <kafka jars>:<interceptor jar> AuditedSends.java MODE
// BOOTSTRAP TOPIC AUDIT_TOPIC ARGS...`, printing what it did.
//   transactions N PER: N transactions of PER messages, the even ones committed, the odd ones aborted;
//     prints `committed C`.
//   failed TS...: per timestamp TS (epoch ms) a 2,000-byte message over max.request.size (refused by the producer)
//     and a 1,000-byte one (refused by a broker whose topic takes less); prints `failed F`.
//   outage MAX_ENTRIES TS...: flushing every 200 ms with kaudit.tally.max.entries=MAX_ENTRIES, one message at the first
//     TS, a second later one at each other TS; prints `buffered` and waits for a line on stdin before closing.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class AuditedSends {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[1]);
        props.put("key.serializer", ByteArraySerializer.class.getName());
        props.put("value.serializer", ByteArraySerializer.class.getName());
        props.put("acks", "all");
        props.put("interceptor.classes", "io.kaudit.KafkaAuditInterceptor");
        props.put("kaudit.cluster", "dc1");
        props.put("kaudit.audit.topic", args[3]);
        switch (args[0]) {
            case "transactions" -> transactions(props, args[2], Integer.parseInt(args[4]), Integer.parseInt(args[5]));
            case "failed" -> failed(props, args);
            case "outage" -> outage(props, args);
            default -> throw new IllegalArgumentException(args[0]);
        }
    }

    static void transactions(Properties props, String topic, int transactions, int perTransaction) {
        props.put("transactional.id", "audited-" + topic);
        long committed = 0;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            producer.initTransactions();
            for (int t = 0; t < transactions; t++) {
                producer.beginTransaction();
                for (int i = 0; i < perTransaction; i++) {
                    producer.send(new ProducerRecord<>(topic, ("k" + i).getBytes(), ("v" + t).getBytes()));
                }
                if (t % 2 == 0) {
                    producer.commitTransaction();
                    committed += perTransaction;
                } else {
                    producer.abortTransaction();
                }
            }
        }
        System.out.println("committed " + committed);
    }

    static void failed(Properties props, String[] args) throws InterruptedException {
        props.put("max.request.size", "1500");
        props.put("retries", "0");
        int failed = 0;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            for (int i = 4; i < args.length; i++) {
                for (int size : new int[] {2000, 1000}) {
                    try {
                        producer.send(new ProducerRecord<>(args[2], 0, Long.parseLong(args[i]), null, new byte[size]))
                                .get();
                    } catch (ExecutionException e) {
                        failed++;
                    }
                }
            }
        }
        System.out.println("failed " + failed);
    }

    static void outage(Properties props, String[] args) throws Exception {
        props.put("kaudit.flush.interval.ms", "200");
        props.put("kaudit.tally.max.entries", args[4]);
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            producer.send(new ProducerRecord<>(args[2], 0, Long.parseLong(args[5]), null, new byte[1])).get();
            Thread.sleep(1000);
            for (int i = 6; i < args.length; i++) {
                producer.send(new ProducerRecord<>(args[2], 0, Long.parseLong(args[i]), null, new byte[1])).get();
            }
            Thread.sleep(1000);
            System.out.println("buffered");
            System.out.flush();
            new BufferedReader(new InputStreamReader(System.in)).readLine();
        }
    }
}
