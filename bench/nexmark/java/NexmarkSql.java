// Flink SQL running one Nexmark query for bench/nexmark/run.py (issue 63): the script's statements (Nexmark's own,
// with its CREATE TABLE of the events a filesystem table of the generator's JSON files, written by run.py) in a
// local environment of the given parallelism, streaming mode, its default (hashmap) state backend.
//
//     java -cp '.cache/flink/lib/*:CLASSES' NexmarkSql run|collect SCRIPT PARALLELISM [OUT [KEY]]
//
// run: the last statement (the query's INSERT INTO its blackhole sink) executed to its end; prints its net runtime.
// collect: the last statement (the query's SELECT) collected as a changelog stream, each change written to OUT
// as a JSON array, one a line: "+" (+I, +U) or "-" (-U, -D), then each value as a string (timestamps
// yyyy-MM-dd HH:mm:ss.SSS, decimals plain). KEY (column positions, "0,1"): the changes come as upserts (+U
// without -U, as Flink's Top-1 gives them): each key's last row is written, once the stream ends.
import org.apache.flink.api.common.JobExecutionResult;
import org.apache.flink.configuration.ConfigOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.table.api.TableResult;
import org.apache.flink.table.api.bridge.java.StreamTableEnvironment;
import org.apache.flink.types.Row;
import org.apache.flink.types.RowKind;
import org.apache.flink.util.CloseableIterator;

import java.io.BufferedWriter;
import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.time.Instant;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

public class NexmarkSql {
    private static final DateTimeFormatter TIME = DateTimeFormatter.ofPattern("yyyy-MM-dd HH:mm:ss.SSS");
    private static final org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper JSON =
            new org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper();

    public static void main(String[] args) throws Exception {
        String mode = args[0];
        String script = new String(Files.readAllBytes(Paths.get(args[1])), StandardCharsets.UTF_8);
        int parallelism = Integer.parseInt(args[2]);
        Configuration conf = new Configuration();
        conf.set(ConfigOptions.key("rest.bind-port").stringType().noDefaultValue(), "0");
        conf.set(ConfigOptions.key("table.local-time-zone").stringType().noDefaultValue(), "UTC");
        StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(parallelism, conf);
        StreamTableEnvironment tEnv = StreamTableEnvironment.create(env);
        String[] statements = script.split(";\\s*\\n");
        for (int i = 0; i < statements.length - 1; i++) {
            tEnv.executeSql(statements[i]);
        }
        String last = statements[statements.length - 1].trim();
        long started = System.nanoTime();
        if (mode.equals("run")) {
            TableResult result = tEnv.executeSql(last);
            result.await();
            JobExecutionResult done = result.getJobClient().get().getJobExecutionResult().get();
            System.out.printf("flink-job net_ms=%d execute_ms=%d%n", done.getNetRuntime(),
                    (System.nanoTime() - started) / 1_000_000);
            return;
        }
        // KEY: an upsert changelog (+U without -U: a Top-1 gives its changes so), kept as each key's last row
        int[] key = args.length > 4 && !args[4].isEmpty()
                ? java.util.Arrays.stream(args[4].split(",")).mapToInt(Integer::parseInt).toArray() : new int[0];
        Map<List<String>, List<String>> upserted = new HashMap<>();
        long changes = 0;
        Map<RowKind, Long> kinds = new java.util.EnumMap<>(RowKind.class);
        // a changelog stream of every kind: retractions as -U/-D of the rows they take back
        try (CloseableIterator<Row> it = tEnv.toChangelogStream(tEnv.sqlQuery(last),
                org.apache.flink.table.api.Schema.derived(),
                org.apache.flink.table.connector.ChangelogMode.all()).executeAndCollect();
             BufferedWriter out = Files.newBufferedWriter(Paths.get(args[3]), StandardCharsets.UTF_8)) {
            while (it.hasNext()) {
                Row row = it.next();
                RowKind kind = row.getKind();
                boolean adds = kind == RowKind.INSERT || kind == RowKind.UPDATE_AFTER;
                List<String> values = new ArrayList<>(row.getArity() + 1);
                values.add(adds ? "+" : "-");
                for (int i = 0; i < row.getArity(); i++) {
                    values.add(text(row.getField(i)));
                }
                if (key.length > 0) {
                    List<String> k = new ArrayList<>();
                    for (int i : key) {
                        k.add(values.get(i + 1));
                    }
                    if (adds) {
                        upserted.put(k, values);
                    } else {
                        upserted.remove(k);
                    }
                } else {
                    out.write(json(values));
                    out.write('\n');
                }
                changes++;
                kinds.merge(kind, 1L, Long::sum);
            }
            if (key.length > 0 && kinds.containsKey(RowKind.UPDATE_BEFORE)) {
                throw new IllegalStateException("KEY given, but the changes are not upserts: " + kinds);
            }
            for (List<String> values : upserted.values()) {
                out.write(json(values));
                out.write('\n');
            }
        }
        System.out.printf("flink-collect changes=%d kinds=%s execute_ms=%d%n", changes, kinds,
                (System.nanoTime() - started) / 1_000_000);
    }

    private static String text(Object value) {
        if (value == null) {
            return null;
        } else if (value instanceof LocalDateTime) {
            return TIME.format((LocalDateTime) value);
        } else if (value instanceof Instant) {
            return TIME.format(LocalDateTime.ofInstant((Instant) value, ZoneOffset.UTC));
        } else if (value instanceof BigDecimal) {
            return ((BigDecimal) value).toPlainString();
        }
        return value.toString();
    }

    private static String json(List<String> values) throws java.io.IOException {
        return JSON.writeValueAsString(values);
    }
}
