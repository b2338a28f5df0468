package io.kaudit;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.util.Arrays;
import java.util.Random;
import net.jpountz.xxhash.XXHash64;
import net.jpountz.xxhash.XXHashFactory;

/**
 * The content digest's message hash ({@link ContentDigest#messageHash}, its hand-written XXH64) against the same form
 * on lz4-java's XXH64, which every Kafka client has on its class path: same inputs, sides alternated, the median of
 * rounds. Run from the repository's root, after `make interceptor`:
 * <pre>
 * java -cp "$(echo ~/.cache/kafka-audit/jars/kafka/lz4-java-*.jar):$HOME/.cache/kafka-audit/jars/interceptor/kafka-audit-interceptor.jar" \
 *     jvm/interceptor/src/test/java/io/kaudit/DigestBench.java
 * </pre>
 * Prints ns per message for 100-byte and 1 KiB messages (a 16-byte key, the rest value), in the thread's CPU time,
 * so that other processes on the machine sway it less.
 */
public final class DigestBench {
    private static final int MESSAGES = 4096; // distinct inputs
    private static final int REPEATS = 50; // passes over them per round and side
    private static final int ROUNDS = 41;
    private static final int WARM_ROUNDS = 5;
    private static final int KEY_BYTES = 16;

    interface Side {
        long sum(byte[][] keys, byte[][] values);
    }

    public static void main(String[] args) {
        ThreadMXBean threads = ManagementFactory.getThreadMXBean();
        XXHash64 safe = XXHashFactory.safeInstance().hash64();
        XXHash64 fastest = XXHashFactory.fastestJavaInstance().hash64();
        String[] names = {"ContentDigest (hand-written XXH64)", "lz4-java " + XXHashFactory.safeInstance(),
            "lz4-java " + XXHashFactory.fastestJavaInstance()};
        Side[] sides = {DigestBench::sumContentDigest, (k, v) -> sumSafe(safe, k, v), (k, v) -> sumFastest(fastest, k, v)};
        for (int size : new int[] {100, 1024}) {
            byte[][] keys = new byte[MESSAGES][];
            byte[][] values = new byte[MESSAGES][];
            Random random = new Random(size);
            for (int i = 0; i < MESSAGES; i++) {
                keys[i] = new byte[KEY_BYTES];
                values[i] = new byte[size - KEY_BYTES];
                random.nextBytes(keys[i]);
                random.nextBytes(values[i]);
            }
            long expected = sides[0].sum(keys, values);
            double[][] nanos = new double[sides.length][ROUNDS];
            for (int round = -WARM_ROUNDS; round < ROUNDS; round++) {
                for (int s = 0; s < sides.length; s++) {
                    int side = (s + Math.max(round, 0)) % sides.length; // each side first in turn
                    long start = threads.getCurrentThreadCpuTime();
                    long got = 0;
                    for (int r = 0; r < REPEATS; r++) {
                        got += sides[side].sum(keys, values);
                    }
                    long elapsed = threads.getCurrentThreadCpuTime() - start;
                    if (got != expected * REPEATS) {
                        throw new AssertionError(names[side] + " hashes differently");
                    }
                    if (round >= 0) {
                        nanos[side][round] = (double) elapsed / ((long) REPEATS * MESSAGES);
                    }
                }
            }
            for (int side = 0; side < sides.length; side++) {
                double[] sorted = nanos[side].clone();
                Arrays.sort(sorted);
                System.out.printf("%4d-byte messages  %-36s %7.1f ns/message (median of %d rounds)%n",
                        size, names[side], sorted[ROUNDS / 2], ROUNDS);
            }
        }
    }

    // One method per side, so that each call site sees one hash and the JIT inlines it.
    private static long sumContentDigest(byte[][] keys, byte[][] values) {
        long total = 0;
        for (int i = 0; i < keys.length; i++) {
            total += ContentDigest.messageHash(keys[i], values[i]);
        }
        return total;
    }

    private static long sumSafe(XXHash64 xxh64, byte[][] keys, byte[][] values) {
        long total = 0;
        for (int i = 0; i < keys.length; i++) {
            total += messageHash(xxh64, keys[i], values[i]);
        }
        return total;
    }

    // The same as sumSafe, a call site of its own.
    private static long sumFastest(XXHash64 xxh64, byte[][] keys, byte[][] values) {
        long total = 0;
        for (int i = 0; i < keys.length; i++) {
            long h = Contract.DIGEST_SEED;
            int flags = 0;
            byte[] key = keys[i];
            byte[] value = values[i];
            if (key == null) {
                flags |= Contract.DIGEST_KEY_NULL;
            } else {
                h = xxh64.hash(key, 0, key.length, h);
            }
            if (value == null) {
                flags |= Contract.DIGEST_VALUE_NULL;
            } else {
                h = xxh64.hash(value, 0, value.length, h);
            }
            total += xxh64.hash(new byte[] {(byte) flags, 0, 0, 0}, 0, 4, h);
        }
        return total;
    }

    /** {@link ContentDigest#messageHash} on lz4-java's XXH64. */
    private static long messageHash(XXHash64 xxh64, byte[] key, byte[] value) {
        long h = Contract.DIGEST_SEED;
        int flags = 0;
        if (key == null) {
            flags |= Contract.DIGEST_KEY_NULL;
        } else {
            h = xxh64.hash(key, 0, key.length, h);
        }
        if (value == null) {
            flags |= Contract.DIGEST_VALUE_NULL;
        } else {
            h = xxh64.hash(value, 0, value.length, h);
        }
        return xxh64.hash(new byte[] {(byte) flags, 0, 0, 0}, 0, 4, h);
    }
}
