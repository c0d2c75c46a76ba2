package mongoprobe.bench;

import com.mongodb.ConnectionString;
import com.mongodb.MongoClientSettings;
import com.mongodb.client.MongoClient;
import com.mongodb.client.MongoClients;
import com.mongodb.client.MongoCollection;
import com.mongodb.client.model.Filters;
import org.bson.Document;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.atomic.LongAdder;

/**
 * Load - N threads, one pooled connection each, doing find_one by _id (a random one of
 * --docs documents inserted first) with the MongoDB Java driver.
 *
 * USAGE: java -cp mongoprobe-bench.jar mongoprobe.bench.Load --uri URI [--threads N]
 *            [--docs K] [--warmup SEC] (--seconds SEC | --count N | --serve)
 *
 * One run prints one JSON line on stdout:
 *   {"requests": 51234, "seconds": 5.001, "ops_per_s": 10244.7, "threads": 8, "errors": 0}
 * requests counts the find_one calls answered in the run, and only them (the inserts,
 * the handshakes and the warm-up are before it). An answer without the document, or
 * an exception, counts in errors (the first message is printed on stderr).
 *
 * --serve: set up (connect, insert, warm up), print {"ready": true, ...}, then read
 * commands on stdin, one a line: "run SEC" or "count N" (one run each, one result
 * line), "quit" (or end of input). A driver of the benchmark can so take its own
 * measurements right before and after each run, on connections already open.
 */
public final class Load {
    static final String DB = "mongoprobe_bench";
    static final String COLLECTION = "find_one";

    public static void main(String[] args) throws Exception {
        String uri = null;
        int threads = 8, docs = 100;
        double seconds = 0, warmup = 1;
        long count = 0;
        boolean serve = false;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--uri" -> uri = args[++i];
                case "--threads" -> threads = Integer.parseInt(args[++i]);
                case "--docs" -> docs = Integer.parseInt(args[++i]);
                case "--seconds" -> seconds = Double.parseDouble(args[++i]);
                case "--count" -> count = Long.parseLong(args[++i]);
                case "--warmup" -> warmup = Double.parseDouble(args[++i]);
                case "--serve" -> serve = true;
                default -> usage("unknown argument " + args[i]);
            }
        }
        if (uri == null) usage("--uri is required");
        if (threads < 1 || docs < 1) usage("--threads and --docs must be at least 1");
        if (!serve && (seconds > 0) == (count > 0)) usage("give one of --seconds, --count, --serve");

        final int poolSize = threads;
        MongoClientSettings settings = MongoClientSettings.builder()
                .applyConnectionString(new ConnectionString(uri))
                .applyToConnectionPoolSettings(b -> b.maxSize(poolSize).minSize(poolSize))
                .build();
        try (MongoClient client = MongoClients.create(settings)) {
            MongoCollection<Document> coll = client.getDatabase(DB).getCollection(COLLECTION);
            coll.drop();
            List<Document> batch = new ArrayList<>();
            for (int i = 0; i < docs; i++) {
                batch.add(new Document("_id", i).append("n", i).append("s", "document " + i));
            }
            coll.insertMany(batch);
            Load load = new Load(coll, threads, docs);
            if (warmup > 0) {
                Result w = load.run(warmup, 0);
                if (w.errors > 0) fail("warm-up: " + w.firstError);
            }
            if (!serve) {
                Result r = load.run(seconds, count);
                System.out.println(r.json());
                System.exit(r.errors > 0 ? 1 : 0);
            }
            System.out.printf("{\"ready\": true, \"threads\": %d, \"docs\": %d}%n", threads, docs);
            System.out.flush();
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            for (String line; (line = in.readLine()) != null; ) {
                String[] w = line.trim().split("\\s+");
                if (w[0].equals("quit")) break;
                Result r;
                if (w.length == 2 && w[0].equals("run")) {
                    r = load.run(Double.parseDouble(w[1]), 0);
                } else if (w.length == 2 && w[0].equals("count")) {
                    r = load.run(0, Long.parseLong(w[1]));
                } else {
                    System.out.println("{\"error\": \"expected: run SEC | count N | quit\"}");
                    System.out.flush();
                    continue;
                }
                System.out.println(r.json());
                System.out.flush();
            }
        }
    }

    static void usage(String why) {
        System.err.println("Load: " + why + "\nusage: Load --uri URI [--threads N] [--docs K] "
                + "[--warmup SEC] (--seconds SEC | --count N | --serve)");
        System.exit(2);
    }

    static void fail(String why) {
        System.err.println("Load: " + why);
        System.exit(1);
    }

    record Result(long requests, double seconds, int threads, long errors, String firstError) {
        String json() {
            return String.format(Locale.ROOT,
                    "{\"requests\": %d, \"seconds\": %.4f, \"ops_per_s\": %.1f, \"threads\": %d, "
                            + "\"errors\": %d}",
                    requests, seconds, seconds > 0 ? requests / seconds : 0.0, threads, errors);
        }
    }

    final MongoCollection<Document> coll;
    final int threads, docs;

    Load(MongoCollection<Document> coll, int threads, int docs) {
        this.coll = coll;
        this.threads = threads;
        this.docs = docs;
    }

    /** One run: for {@code seconds}, or until {@code count} requests in all (when > 0). */
    Result run(double seconds, long count) throws InterruptedException {
        AtomicBoolean stop = new AtomicBoolean();
        AtomicLong left = new AtomicLong(count);
        LongAdder done = new LongAdder(), errors = new LongAdder();
        AtomicReference<String> firstError = new AtomicReference<>();
        CountDownLatch go = new CountDownLatch(1);
        List<Thread> workers = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            Thread th = new Thread(() -> {
                ThreadLocalRandom rnd = ThreadLocalRandom.current();
                try {
                    go.await();
                } catch (InterruptedException e) {
                    return;
                }
                while (!stop.get() && (count <= 0 || left.getAndDecrement() > 0)) {
                    int id = rnd.nextInt(docs);
                    try {
                        Document d = coll.find(Filters.eq("_id", id)).first();
                        if (d == null) {
                            errors.increment();
                            firstError.compareAndSet(null, "no document with _id " + id);
                        }
                    } catch (RuntimeException e) {
                        errors.increment();
                        firstError.compareAndSet(null, e.toString());
                        if (errors.sum() > 100) stop.set(true);   // the server is gone
                    }
                    done.increment();
                }
            }, "load-" + t);
            th.start();
            workers.add(th);
        }
        long t0 = System.nanoTime();
        go.countDown();
        if (count <= 0) {
            TimeUnit.NANOSECONDS.sleep((long) (seconds * 1e9));
            stop.set(true);
        }
        for (Thread th : workers) th.join();
        double elapsed = (System.nanoTime() - t0) / 1e9;
        if (firstError.get() != null) System.err.println("Load: " + firstError.get());
        return new Result(done.sum() - errors.sum(), elapsed, threads, errors.sum(), firstError.get());
    }
}
