// Flink's own JVM engine on bench/jobs.py's logic: per key a running (count, sum of amount) in one ValueState,
// an output (key, count, sum) per record, over CSV files of workload R or L (key,amount,ts), streaming mode,
// parallelism and state backend (hashmap or rocksdb) as given. bench/flink.py compiles and runs it:
//
//     java -cp '.cache/flink/lib/*:.cache/flink/classes' CountSum DIR BACKEND PARALLELISM
//
// The outputs are not written: a chained, non-keyed step after the keyed one keeps each key's last output in a
// hash map per subtask (a key's records all reach one subtask), and prints at the end, on one line, the keys, the
// sum of their counts and the sum of their sums, which bench/flink.py compares with Lakestate's sink.
import java.util.HashMap;
import java.util.Map;

import org.apache.flink.api.common.JobExecutionResult;
import org.apache.flink.api.common.RuntimeExecutionMode;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.TypeHint;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.api.java.tuple.Tuple3;
import org.apache.flink.configuration.ConfigOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.file.src.FileSource;
import org.apache.flink.connector.file.src.reader.TextLineInputFormat;
import org.apache.flink.core.fs.Path;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.streaming.api.functions.ProcessFunction;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.util.Collector;

public class CountSum {
    static final TypeInformation<Tuple3<String, Long, Long>> ROW =
            TypeInformation.of(new TypeHint<Tuple3<String, Long, Long>>() {});

    public static class RunningCountSum
            extends KeyedProcessFunction<String, Tuple3<String, Long, Long>, Tuple3<String, Long, Long>> {
        private transient ValueState<Tuple2<Long, Long>> acc;

        @Override
        public void open(OpenContext context) {
            acc = getRuntimeContext().getState(new ValueStateDescriptor<>(
                    "acc", TypeInformation.of(new TypeHint<Tuple2<Long, Long>>() {})));
        }

        @Override
        public void processElement(Tuple3<String, Long, Long> event, Context ctx,
                                   Collector<Tuple3<String, Long, Long>> out) throws Exception {
            Tuple2<Long, Long> current = acc.value();
            long count = (current == null ? 0 : current.f0) + 1;
            long sum = (current == null ? 0 : current.f1) + event.f1;
            acc.update(Tuple2.of(count, sum));
            out.collect(Tuple3.of(event.f0, count, sum));
        }
    }

    public static class LastPerKey extends ProcessFunction<Tuple3<String, Long, Long>, Tuple3<String, Long, Long>> {
        private final Map<String, long[]> last = new HashMap<>();

        @Override
        public void processElement(Tuple3<String, Long, Long> row, Context ctx,
                                   Collector<Tuple3<String, Long, Long>> out) {
            last.put(row.f0, new long[] {row.f1, row.f2});
        }

        @Override
        public void close() {
            long counts = 0, sums = 0;
            for (long[] v : last.values()) {
                counts += v[0];
                sums += v[1];
            }
            System.out.println("flink-subtask keys=" + last.size() + " counts=" + counts + " sums=" + sums);
        }
    }

    public static void main(String[] args) throws Exception {
        String dir = args[0], backend = args[1];
        int parallelism = Integer.parseInt(args[2]);
        Configuration conf = new Configuration();
        conf.set(ConfigOptions.key("state.backend.type").stringType().noDefaultValue(), backend);
        conf.set(ConfigOptions.key("rest.bind-port").stringType().noDefaultValue(), "0");
        StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(parallelism, conf);
        env.setRuntimeMode(RuntimeExecutionMode.STREAMING);
        FileSource<String> files = FileSource.forRecordStreamFormat(new TextLineInputFormat(), new Path(dir)).build();
        env.fromSource(files, WatermarkStrategy.noWatermarks(), "csv")
                .map(line -> {
                    String[] f = line.split(",");
                    return Tuple3.of(f[0], Long.parseLong(f[1]), Long.parseLong(f[2]));
                }).returns(ROW)
                .keyBy(e -> e.f0)
                .process(new RunningCountSum()).returns(ROW)
                .process(new LastPerKey()).returns(ROW)
                .sinkTo(new DiscardingSink<>());
        long started = System.nanoTime();
        JobExecutionResult result = env.execute("count-sum");
        System.out.printf("flink-job net_ms=%d execute_ms=%d%n", result.getNetRuntime(),
                (System.nanoTime() - started) / 1_000_000);
    }
}
