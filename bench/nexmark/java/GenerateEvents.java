// Nexmark's own generator (the sources beside this file, nexmark/nexmark at commit 6b3646c, as they are) writing
// its first N events as JSON lines, for bench/nexmark/java_check.py to compare with bench/nexmark/generate.py.
// Its three random sources are seeded by bench/nexmark/java_check.py (nexmark.seed, + 1, + 2); the generator is
// configured as Nexmark's table source configures it: first event id 1, first event number 1, one generator.
import com.github.nexmark.flink.NexmarkConfiguration;
import com.github.nexmark.flink.generator.GeneratorConfig;
import com.github.nexmark.flink.generator.NexmarkGenerator;
import com.github.nexmark.flink.model.Auction;
import com.github.nexmark.flink.model.Bid;
import com.github.nexmark.flink.model.Event;
import com.github.nexmark.flink.model.Person;

import java.io.BufferedWriter;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;

public class GenerateEvents {
    private static final DateTimeFormatter TIME =
            DateTimeFormatter.ofPattern("yyyy-MM-dd HH:mm:ss.SSS").withZone(ZoneOffset.UTC);

    public static void main(String[] args) {
        long events = Long.parseLong(args[0]);
        int rate = Integer.parseInt(args[1]);
        long baseTime = Long.parseLong(args[2]);
        NexmarkConfiguration conf = new NexmarkConfiguration();
        conf.firstEventRate = rate;
        conf.nextEventRate = rate;
        conf.numEvents = events;
        NexmarkGenerator generator = new NexmarkGenerator(
                new GeneratorConfig(conf, baseTime, 1, events, conf.stopAtEvent, 1));
        PrintWriter out = new PrintWriter(new BufferedWriter(
                new OutputStreamWriter(System.out, StandardCharsets.UTF_8), 1 << 16));
        while (generator.hasNext()) {
            out.println(line(generator.next().event));
        }
        out.flush();
    }

    private static String line(Event event) {
        StringBuilder sb = new StringBuilder("{\"event_type\":").append(event.type.value);
        sb.append(",\"person\":");
        Person p = event.newPerson;
        if (p == null) {
            sb.append("null");
        } else {
            sb.append("{\"id\":").append(p.id).append(",\"name\":").append(q(p.name))
                    .append(",\"emailAddress\":").append(q(p.emailAddress))
                    .append(",\"creditCard\":").append(q(p.creditCard)).append(",\"city\":").append(q(p.city))
                    .append(",\"state\":").append(q(p.state)).append(",\"dateTime\":").append(t(p.dateTime))
                    .append(",\"extra\":").append(q(p.extra)).append('}');
        }
        sb.append(",\"auction\":");
        Auction a = event.newAuction;
        if (a == null) {
            sb.append("null");
        } else {
            sb.append("{\"id\":").append(a.id).append(",\"itemName\":").append(q(a.itemName))
                    .append(",\"description\":").append(q(a.description))
                    .append(",\"initialBid\":").append(a.initialBid).append(",\"reserve\":").append(a.reserve)
                    .append(",\"dateTime\":").append(t(a.dateTime)).append(",\"expires\":").append(t(a.expires))
                    .append(",\"seller\":").append(a.seller).append(",\"category\":").append(a.category)
                    .append(",\"extra\":").append(q(a.extra)).append('}');
        }
        sb.append(",\"bid\":");
        Bid b = event.bid;
        if (b == null) {
            sb.append("null");
        } else {
            sb.append("{\"auction\":").append(b.auction).append(",\"bidder\":").append(b.bidder)
                    .append(",\"price\":").append(b.price).append(",\"channel\":").append(q(b.channel))
                    .append(",\"url\":").append(q(b.url)).append(",\"dateTime\":").append(t(b.dateTime))
                    .append(",\"extra\":").append(q(b.extra)).append('}');
        }
        return sb.append('}').toString();
    }

    private static String t(Instant instant) {
        return q(TIME.format(instant));
    }

    private static String q(String s) {
        StringBuilder sb = new StringBuilder(s.length() + 2).append('"');
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                sb.append('\\').append(c);
            } else if (c < 0x20) {
                sb.append(String.format("\\u%04x", (int) c));
            } else {
                sb.append(c);
            }
        }
        return sb.append('"').toString();
    }
}
