package io.kaudit;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteOrder;

/**
 * The content digest's message hash, as audit/contract/digest.py defines it (Spark's xxhash64 over key, value
 * and the null flags, seed {@value Contract#DIGEST_SEED}): XXH64 chained through the seed. A window's digest is
 * the wrapping sum of its messages' hashes ({@link WindowTally}). tests/test_digest_parity.py holds both to the
 * contract's table of cases.
 */
public final class ContentDigest {
    private static final long P1 = 0x9E3779B185EBCA87L;
    private static final long P2 = 0xC2B2AE3D27D4EB4FL;
    private static final long P3 = 0x165667B19E3779F9L;
    private static final long P4 = 0x85EBCA77C2B2AE63L;
    private static final long P5 = 0x27D4EB2F165667C5L;
    private static final VarHandle LONGS = MethodHandles.byteArrayViewVarHandle(long[].class, ByteOrder.LITTLE_ENDIAN);
    private static final VarHandle INTS = MethodHandles.byteArrayViewVarHandle(int[].class, ByteOrder.LITTLE_ENDIAN);

    private ContentDigest() {}

    /** The hash of one message's serialized key and value (null: absent), a signed 64-bit integer. */
    public static long messageHash(byte[] key, byte[] value) {
        long h = Contract.DIGEST_SEED;
        int flags = 0;
        if (key == null) {
            flags |= Contract.DIGEST_KEY_NULL;
        } else {
            h = xxh64(key, h);
        }
        if (value == null) {
            flags |= Contract.DIGEST_VALUE_NULL;
        } else {
            h = xxh64(value, h);
        }
        byte[] flagBytes = {(byte) flags, 0, 0, 0}; // an INT as 4 little-endian bytes; flags < 256
        return xxh64(flagBytes, h);
    }

    // Not lz4-java's XXH64, which measures slower: java -cp <lz4-java jar>:<this jar> jvm/interceptor/src/test/java/io/kaudit/DigestBench.java
    /** The standard 64-bit xxHash of `input` with `seed`. */
    static long xxh64(byte[] input, long seed) {
        int length = input.length;
        int i = 0;
        long h;
        if (length >= 32) {
            long v1 = seed + P1 + P2;
            long v2 = seed + P2;
            long v3 = seed;
            long v4 = seed - P1;
            for (; i <= length - 32; i += 32) {
                v1 = round(v1, (long) LONGS.get(input, i));
                v2 = round(v2, (long) LONGS.get(input, i + 8));
                v3 = round(v3, (long) LONGS.get(input, i + 16));
                v4 = round(v4, (long) LONGS.get(input, i + 24));
            }
            h = Long.rotateLeft(v1, 1) + Long.rotateLeft(v2, 7) + Long.rotateLeft(v3, 12) + Long.rotateLeft(v4, 18);
            h = mergeRound(mergeRound(mergeRound(mergeRound(h, v1), v2), v3), v4);
        } else {
            h = seed + P5;
        }
        h += length;
        for (; i + 8 <= length; i += 8) {
            h ^= round(0, (long) LONGS.get(input, i));
            h = Long.rotateLeft(h, 27) * P1 + P4;
        }
        if (i + 4 <= length) {
            h ^= ((int) INTS.get(input, i) & 0xFFFFFFFFL) * P1;
            h = Long.rotateLeft(h, 23) * P2 + P3;
            i += 4;
        }
        for (; i < length; i++) {
            h ^= (input[i] & 0xFFL) * P5;
            h = Long.rotateLeft(h, 11) * P1;
        }
        h ^= h >>> 33;
        h *= P2;
        h ^= h >>> 29;
        h *= P3;
        return h ^ (h >>> 32);
    }

    private static long round(long accumulator, long lane) {
        return Long.rotateLeft(accumulator + lane * P2, 31) * P1;
    }

    private static long mergeRound(long accumulator, long value) {
        return (accumulator ^ round(0, value)) * P1 + P4;
    }

    /** For the table of cases (tests/test_digest_parity.py), one question a line, one answer a line, each key and
     * value a hex string or `-` for null: {@code hash KEY VALUE} answers the message's hash, {@code digest [KEY
     * VALUE]...} the digest a {@link WindowTally} sums for those messages in one window and partition (0: none). */
    public static void main(String[] args) throws java.io.IOException {
        var lines = new java.io.BufferedReader(new java.io.InputStreamReader(System.in, "UTF-8"));
        StringBuilder out = new StringBuilder();
        for (String line; (line = lines.readLine()) != null; ) {
            String[] fields = line.split(" ", -1);
            if (fields[0].equals("hash")) {
                out.append(messageHash(bytes(fields[1]), bytes(fields[2]))).append('\n');
                continue;
            }
            WindowTally tally = new WindowTally(Contract.MS_PER_MINUTE, 1);
            for (int i = 1; i + 1 < fields.length; i += 2) {
                tally.acked("t", 1, 0, 0, false, messageHash(bytes(fields[i]), bytes(fields[i + 1])));
            }
            var drained = tally.drain();
            out.append(drained.isEmpty() ? 0 : drained.get(0).digestByPartition[0]).append('\n');
        }
        System.out.print(out);
    }

    private static byte[] bytes(String hex) {
        return hex.equals("-") ? null : java.util.HexFormat.of().parseHex(hex);
    }
}
