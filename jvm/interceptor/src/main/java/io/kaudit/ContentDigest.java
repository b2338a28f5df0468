package io.kaudit;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteOrder;

/**
 * The content digest's message hash, as audit/contract/digest.py defines it (Spark's xxhash64 over key, value
 * and the null flags, seed 42): XXH64 chained through the seed. A window's digest is the wrapping sum of its
 * messages' hashes. tests/test_digest_parity.py holds this form to the contract's table of cases.
 */
public final class ContentDigest {
    static final long SEED = 42;
    static final int KEY_NULL = 1;
    static final int VALUE_NULL = 2;

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
        long h = SEED;
        int flags = 0;
        if (key == null) {
            flags |= KEY_NULL;
        } else {
            h = xxh64(key, h);
        }
        if (value == null) {
            flags |= VALUE_NULL;
        } else {
            h = xxh64(value, h);
        }
        byte[] flagBytes = {(byte) flags, 0, 0, 0}; // an INT as 4 little-endian bytes; flags < 256
        return xxh64(flagBytes, h);
    }

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

    /** Reads `key value` lines, each a hex string or `-` for null, and prints each message's hash: the parity
     * test's way to ask this form. */
    public static void main(String[] args) throws java.io.IOException {
        var lines = new java.io.BufferedReader(new java.io.InputStreamReader(System.in, "UTF-8"));
        for (String line; (line = lines.readLine()) != null; ) {
            String[] fields = line.split(" ", -1);
            System.out.println(messageHash(bytes(fields[0]), bytes(fields[1])));
        }
    }

    private static byte[] bytes(String hex) {
        return hex.equals("-") ? null : java.util.HexFormat.of().parseHex(hex);
    }
}
