package io.kaudit;

/**
 * A long per record (its message hash; its audit time) by the identity of an object (a record's headers) from send
 * to acknowledgement. Sender threads
 * add and the producer's I/O thread takes, up to the hundreds of thousands of records a producer buffers: the
 * table is split into stripes with a lock each, so the two seldom wait on each other, and holds its entries in
 * arrays (open addressing, linear probing), so a record in flight costs the collector no object of ours. An entry
 * whose acknowledgement never finds it (another interceptor after ours replaced the record, headers and all) is
 * swept once it is older than any acknowledgement can be.
 */
final class PendingHashes {
    private static final int STRIPE_BITS = 6;
    private static final int FIRST_CAPACITY = 64; // per stripe, a power of two

    private final Stripe[] stripes = new Stripe[1 << STRIPE_BITS];

    PendingHashes() {
        for (int i = 0; i < stripes.length; i++) {
            stripes[i] = new Stripe();
        }
    }

    /** Fibonacci hashing of the identity hash: its top bits choose the stripe, the rest the slot. */
    private static int spread(Object key) {
        return System.identityHashCode(key) * 0x9E3779B9;
    }

    void add(Object key, long hash) {
        int spread = spread(key);
        stripes[spread >>> (32 - STRIPE_BITS)].add(key, spread, hash, System.currentTimeMillis());
    }

    /** Forgets the entries last added before `cutoffMs` (epoch ms); how many. */
    int sweep(long cutoffMs) {
        int swept = 0;
        for (Stripe stripe : stripes) {
            swept += stripe.sweep(cutoffMs);
        }
        return swept;
    }

    /** The hash added with `key`, once per time it was added; null when there is none (left). */
    Long take(Object key) {
        int spread = spread(key);
        Stripe stripe = stripes[spread >>> (32 - STRIPE_BITS)];
        synchronized (stripe) {
            int slot = stripe.find(key, spread);
            return slot < 0 ? null : stripe.takeAt(slot);
        }
    }

    /** As {@link #take(Object)}, unboxed: `absent` when there is none. */
    long take(Object key, long absent) {
        int spread = spread(key);
        Stripe stripe = stripes[spread >>> (32 - STRIPE_BITS)];
        synchronized (stripe) {
            int slot = stripe.find(key, spread);
            return slot < 0 ? absent : stripe.takeAt(slot);
        }
    }

    private static final class Stripe {
        private Object[] keys = new Object[FIRST_CAPACITY];
        private long[] hashes = new long[FIRST_CAPACITY];
        private int[] times = new int[FIRST_CAPACITY]; // a record object may be sent more than once
        private int[] spreads = new int[FIRST_CAPACITY]; // kept: moving an entry then reads no object of the host's
        private long[] added = new long[FIRST_CAPACITY];
        private int size;

        synchronized void add(Object key, int spread, long hash, long nowMs) {
            if (2 * (size + 1) > keys.length) {
                grow();
            }
            int mask = keys.length - 1;
            int slot = spread & mask;
            for (; keys[slot] != null; slot = (slot + 1) & mask) {
                if (keys[slot] == key) {
                    times[slot]++;
                    added[slot] = nowMs;
                    return;
                }
            }
            keys[slot] = key;
            hashes[slot] = hash;
            times[slot] = 1;
            spreads[slot] = spread;
            added[slot] = nowMs;
            size++;
        }

        /** An entry may move into the slot just emptied: the same slot is looked at again. */
        synchronized int sweep(long cutoffMs) {
            int swept = 0;
            for (int slot = 0; slot < keys.length; ) {
                if (keys[slot] != null && added[slot] < cutoffMs) {
                    removeAt(slot);
                    swept++;
                } else {
                    slot++;
                }
            }
            return swept;
        }

        /** The slot of `key`, or -1; under the stripe's lock. */
        int find(Object key, int spread) {
            int mask = keys.length - 1;
            for (int slot = spread & mask; keys[slot] != null; slot = (slot + 1) & mask) {
                if (keys[slot] == key) {
                    return slot;
                }
            }
            return -1;
        }

        /** The value in `slot`, taken once; under the stripe's lock. */
        long takeAt(int slot) {
            long hash = hashes[slot];
            if (--times[slot] == 0) {
                removeAt(slot);
            }
            return hash;
        }

        /** Backward-shift deletion: the entries after the hole move up where their probe allows. */
        private void removeAt(int hole) {
            int mask = keys.length - 1;
            keys[hole] = null;
            size--;
            for (int next = (hole + 1) & mask; keys[next] != null; next = (next + 1) & mask) {
                int home = spreads[next] & mask;
                boolean movable = hole <= next ? (home <= hole || home > next) : (home <= hole && home > next);
                if (movable) {
                    keys[hole] = keys[next];
                    hashes[hole] = hashes[next];
                    times[hole] = times[next];
                    spreads[hole] = spreads[next];
                    added[hole] = added[next];
                    keys[next] = null;
                    hole = next;
                }
            }
        }

        private void grow() {
            Object[] oldKeys = keys;
            long[] oldHashes = hashes;
            int[] oldTimes = times;
            int[] oldSpreads = spreads;
            long[] oldAdded = added;
            keys = new Object[oldKeys.length * 2];
            added = new long[keys.length];
            hashes = new long[keys.length];
            times = new int[keys.length];
            spreads = new int[keys.length];
            int mask = keys.length - 1;
            for (int i = 0; i < oldKeys.length; i++) {
                if (oldKeys[i] != null) {
                    int slot = oldSpreads[i] & mask;
                    while (keys[slot] != null) {
                        slot = (slot + 1) & mask;
                    }
                    keys[slot] = oldKeys[i];
                    hashes[slot] = oldHashes[i];
                    times[slot] = oldTimes[i];
                    spreads[slot] = oldSpreads[i];
                    added[slot] = oldAdded[i];
                }
            }
        }
    }
}
