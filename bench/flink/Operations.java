// Flink's own operations on bench/jobs.py's state (CountSum's function: per key a running (count, sum) in one
// ValueState), for bench/operations_vs_flink.py: the state built from CSV files of keyed events (key,amount,ts), then a
// stop-with-savepoint; or a restore of that savepoint at another parallelism.
//
//     java -cp '.cache/flink/lib/*:.cache/flink/classes' Operations build DIR BACKEND PARALLELISM EVENTS SAVEPOINTS
//     java -cp ... Operations restore DIR BACKEND PARALLELISM SAVEPOINT PROBES
//
// build: the job reads DIR continuously (so it is still running when its events are in), and once every one of
// EVENTS has updated the state, stops with a savepoint into SAVEPOINTS (canonical format, Flink's default). It
// prints the time of the state's build and of the stop-with-savepoint, and the savepoint's path.
// restore: the same job (same uids, max parallelism 128 as Lakestate's key groups) from SAVEPOINT at PARALLELISM;
// restored when every subtask of the keyed operator has opened (its keyed state backend is restored before
// open). Then PROBES more events, in a file written into DIR after the restore, show the restored values: each
// probe's key and its (count, sum) after it are printed, and the job is cancelled.
import java.io.File;
import java.nio.file.Files;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.flink.api.common.RuntimeExecutionMode;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.java.tuple.Tuple3;
import org.apache.flink.configuration.ConfigOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.file.src.FileSource;
import org.apache.flink.connector.file.src.reader.TextLineInputFormat;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.core.execution.SavepointFormatType;
import org.apache.flink.core.fs.Path;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.util.Collector;

public class Operations {
    static final TypeInformation<Tuple3<String, Long, Long>> ROW = CountSum.ROW;
    // The job runs in this JVM's MiniCluster, so its subtasks and main share these.
    static final AtomicLong UPDATED = new AtomicLong();
    static final AtomicInteger OPENED = new AtomicInteger();
    static final AtomicLong LAST_OPEN = new AtomicLong();
    static final ConcurrentLinkedQueue<String> PROBED = new ConcurrentLinkedQueue<>();

    /** CountSum's function, its updates counted (and with probing, each new value kept) for main to see. */
    public static class CountedCountSum extends CountSum.RunningCountSum {
        private final boolean probing;

        CountedCountSum(boolean probing) {
            this.probing = probing;
        }

        @Override
        public void open(OpenContext context) {
            super.open(context);
            LAST_OPEN.accumulateAndGet(System.nanoTime(), Math::max);
            OPENED.incrementAndGet();
        }

        @Override
        public void processElement(Tuple3<String, Long, Long> event, Context ctx,
                                   Collector<Tuple3<String, Long, Long>> out) throws Exception {
            super.processElement(event, ctx, new Collector<Tuple3<String, Long, Long>>() {
                @Override
                public void collect(Tuple3<String, Long, Long> row) {
                    if (probing) {
                        PROBED.add("flink-probe key=" + row.f0 + " count=" + row.f1 + " sum=" + row.f2);
                    }
                    UPDATED.incrementAndGet();
                }

                @Override
                public void close() {}
            });
        }
    }

    static JobClient start(String dir, String backend, int parallelism, String savepoint) throws Exception {
        Configuration conf = new Configuration();
        conf.set(ConfigOptions.key("state.backend.type").stringType().noDefaultValue(), backend);
        conf.set(ConfigOptions.key("rest.bind-port").stringType().noDefaultValue(), "0");
        // RocksDB as a user with millions of keys sets it up: a bloom filter (without one, a lookup of a key not yet
        // stored reads every level: hours for 10M new keys) and 1 GiB of managed memory for its caches.
        conf.set(ConfigOptions.key("state.backend.rocksdb.use-bloom-filter").stringType().noDefaultValue(), "true");
        conf.set(ConfigOptions.key("taskmanager.memory.managed.size").stringType().noDefaultValue(), "1g");
        // A savepoint larger than 5 MiB needs a file system checkpoint storage (the local default keeps it in memory).
        conf.set(ConfigOptions.key("execution.checkpointing.storage").stringType().noDefaultValue(), "filesystem");
        conf.set(ConfigOptions.key("execution.checkpointing.dir").stringType().noDefaultValue(),
                new File(System.getProperty("java.io.tmpdir"), "lakestate-flink-checkpoints").toURI().toString());
        if (savepoint != null) {
            conf.set(ConfigOptions.key("execution.state-recovery.path").stringType().noDefaultValue(), savepoint);
        }
        StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(parallelism, conf);
        env.setRuntimeMode(RuntimeExecutionMode.STREAMING);
        env.setMaxParallelism(128);
        FileSource<String> files = FileSource.forRecordStreamFormat(new TextLineInputFormat(), new Path(dir))
                .monitorContinuously(Duration.ofMillis(200)).build();
        env.fromSource(files, WatermarkStrategy.noWatermarks(), "csv").uid("csv")
                .map(line -> {
                    String[] f = line.split(",");
                    return Tuple3.of(f[0], Long.parseLong(f[1]), Long.parseLong(f[2]));
                }).returns(ROW).uid("parse")
                .keyBy(e -> e.f0)
                .process(new CountedCountSum(savepoint != null)).returns(ROW).uid("count-sum")
                .sinkTo(new DiscardingSink<>()).uid("discard");
        return env.executeAsync("count-sum");
    }

    static long size(File f) {
        if (f.isFile()) {
            return f.length();
        }
        long total = 0;
        File[] children = f.listFiles();
        for (File c : children == null ? new File[0] : children) {
            total += size(c);
        }
        return total;
    }

    static void waitFor(java.util.function.BooleanSupplier done, JobClient job) throws Exception {
        while (!done.getAsBoolean()) {
            if (job.getJobStatus().get().isTerminalState()) {
                throw new IllegalStateException("the job ended: " + job.getJobStatus().get());
            }
            Thread.sleep(5);
        }
    }

    public static void main(String[] args) throws Exception {
        String mode = args[0], dir = args[1], backend = args[2];
        int parallelism = Integer.parseInt(args[3]);
        long started = System.nanoTime();
        if (mode.equals("build")) {
            long events = Long.parseLong(args[4]);
            JobClient job = start(dir, backend, parallelism, null);
            waitFor(() -> UPDATED.get() >= events, job);
            long built = System.nanoTime();
            String path = job.stopWithSavepoint(false, args[5], SavepointFormatType.CANONICAL).get();
            long stopped = System.nanoTime();
            System.out.printf("flink-build ms=%d%nflink-savepoint ms=%d bytes=%d path=%s%n",
                    (built - started) / 1_000_000, (stopped - built) / 1_000_000, size(new File(new java.net.URI(path))), path);
            return;
        }
        List<String> probes = Files.readAllLines(new File(args[5]).toPath());
        JobClient job = start(dir, backend, parallelism, args[4]);
        waitFor(() -> OPENED.get() >= parallelism, job);
        System.out.printf("flink-restore ms=%d%n", (LAST_OPEN.get() - started) / 1_000_000);
        File probe = new File(dir, "_probe.csv");
        Files.write(probe.toPath(), probes);
        probe.renameTo(new File(dir, "zz-probe.csv"));
        waitFor(() -> UPDATED.get() >= probes.size(), job);
        PROBED.forEach(System.out::println);
        job.cancel().get();
        new File(dir, "zz-probe.csv").delete();
    }
}
