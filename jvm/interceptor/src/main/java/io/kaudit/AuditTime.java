package io.kaudit;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.Headers;

/**
 * The audit time of a message (audit.contract.audit_time), as the interceptor meets it: a record as sent, whose
 * window a failed send counts in, and a message as the broker acknowledged it. {@link #NONE} stands for no usable
 * time: the caller counts at its own clock then.
 */
final class AuditTime {
    static final long NONE = Long.MIN_VALUE;

    private AuditTime() {}

    static boolean usable(long ms) {
        return ms > 0 && ms <= Contract.MAX_AUDIT_TIME_MS;
    }

    /** A record as sent: its timestamp (null: the producer stamps the send's time, `nowMs`), else the time of its
     * last kaudit-time header, else {@link #NONE}. */
    static long ofSend(Long timestamp, Headers headers, long nowMs) {
        long createTime = timestamp == null ? nowMs : timestamp;
        if (usable(createTime)) {
            return createTime;
        }
        Header header = headers == null ? null : headers.lastHeader(Contract.AUDIT_TIME_HEADER);
        return header == null ? NONE : fromHeader(header.value());
    }

    /** A message as acknowledged: its CreateTime, or the broker's LogAppendTime; else {@link #NONE}. */
    static long ofAck(long timestamp) {
        return usable(timestamp) ? timestamp : NONE;
    }

    /** The time a kaudit-time header holds: 1 to {@value Contract#AUDIT_TIME_HEADER_MAX_DIGITS} ASCII digits making a
     * usable time; else {@link #NONE}. */
    static long fromHeader(byte[] value) {
        if (value == null || value.length == 0 || value.length > Contract.AUDIT_TIME_HEADER_MAX_DIGITS) {
            return NONE;
        }
        long ms = 0;
        for (byte b : value) {
            if (b < '0' || b > '9') {
                return NONE;
            }
            if (ms > Contract.MAX_AUDIT_TIME_MS) {
                return NONE; // and stays none: no more digits make it smaller
            }
            ms = ms * 10 + (b - '0');
        }
        return usable(ms) ? ms : NONE;
    }

    /** The start of the `windowMs`-long window holding `timeMs` (audit.contract.windows.window_start_ms). */
    static long windowStart(long timeMs, long windowMs) {
        return Math.floorDiv(timeMs, windowMs) * windowMs;
    }

    /**
     * For the table of cases (tests/test_contract_parity.py), one question a line, one answer a line:
     * {@code send TIMESTAMP|- NOW WINDOW_MS [NAME:HEX|NAME:-]...} (a record as sent, with its headers; `-`: no
     * timestamp, a null value) and {@code ack TIMESTAMP NOW WINDOW_MS} answer {@code TIME USABLE WINDOW_START};
     * {@code window TIME WINDOW_MS} answers the window's start. Needs kafka-clients on the class path.
     */
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.US_ASCII));
        StringBuilder out = new StringBuilder();
        for (String line; (line = in.readLine()) != null; ) {
            String[] f = line.trim().split(" ");
            if (f[0].equals("window")) {
                out.append(windowStart(Long.parseLong(f[1]), Long.parseLong(f[2]))).append('\n');
                continue;
            }
            long now = Long.parseLong(f[2]);
            long time = f[0].equals("send")
                    ? ofSend(f[1].equals("-") ? null : Long.valueOf(f[1]), headers(f), now)
                    : ofAck(Long.parseLong(f[1]));
            long counted = time == NONE ? now : time;
            out.append(counted).append(' ').append(time != NONE).append(' ')
                    .append(windowStart(counted, Long.parseLong(f[3]))).append('\n');
        }
        System.out.print(out);
    }

    private record Given(String key, byte[] value) implements Header {}

    /** The headers of a record made with the public API only, as an application makes it. */
    private static Headers headers(String[] fields) {
        List<Header> given = new ArrayList<>();
        for (int i = 4; i < fields.length; i++) {
            int colon = fields[i].indexOf(':');
            String value = fields[i].substring(colon + 1);
            given.add(new Given(fields[i].substring(0, colon), value.equals("-") ? null : HexFormat.of().parseHex(value)));
        }
        return new ProducerRecord<>("t", null, null, null, null, given).headers();
    }
}
