// Writes with Apache Kafka's own Java producer, the way Kafka Streams and Flink exactly-once do:
// `java -cp <kafka jars> TransactionalProduce.java BOOTSTRAP TOPIC PARTITIONS TRANSACTIONS PER_TRANSACTION`
// writes TRANSACTIONS transactions of PER_TRANSACTION messages round-robin over the partitions, committing
// the even ones and aborting the odd ones (the last one aborted when TRANSACTIONS is even), and prints
// `committed N`. Used by the tests to prove every tier counts what a read_committed reader gets.
import java.util.Properties;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class TransactionalProduce {
    public static void main(String[] args) throws Exception {
        String topic = args[1];
        int partitions = Integer.parseInt(args[2]);
        int transactions = Integer.parseInt(args[3]);
        int perTransaction = Integer.parseInt(args[4]);
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("transactional.id", "java-outside-" + topic);
        props.put("key.serializer", ByteArraySerializer.class.getName());
        props.put("value.serializer", ByteArraySerializer.class.getName());
        long committed = 0;
        long sequence = 0;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            producer.initTransactions();
            for (int t = 0; t < transactions; t++) {
                producer.beginTransaction();
                for (int i = 0; i < perTransaction; i++, sequence++) {
                    byte[] key = ("k" + sequence).getBytes();
                    int partition = (int) (sequence % partitions);
                    producer.send(new ProducerRecord<>(topic, partition, key, ("v" + sequence).getBytes()));
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
}
